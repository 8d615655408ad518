"""What a conversation costs in Firestore writes and Cloud Tasks calls, counted.

    .venv/bin/python bench/conversation_cost.py [--replies 20] [--seconds 4]

Runs the real agent (``shared.wiring.assemble``) on the in-memory stores and queue, which
make one write where the Firestore adapters make one: a conversation write per change
(the adapters send each change as one commit, or one entry of a ``BatchWrite``), a
ledger write per change of the user's ledger (none when nothing changed). Each reply
streams ``--seconds`` of text at 50 tokens/s with the default settings (one streaming
write per 500 ms at most). Every task is delivered to the tasks handler, as Cloud Tasks
would, and its writes are counted too. Prints the counts for ``--replies`` streamed
replies and for as many ``202`` (background) replies, in one conversation each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from shared.auth.base import User  # noqa: E402
from shared.clock import SystemClock  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.llm.scripted import ScriptedProvider, Step  # noqa: E402
from shared.queue.memory import InMemoryTaskQueue  # noqa: E402
from shared.schemas.tasks import TASK_PAYLOAD  # noqa: E402
from shared.store.memory import (  # noqa: E402
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.wiring import assemble  # noqa: E402

TOKENS_PER_SECOND = 50


async def conversation(replies: int, seconds: float, background: bool) -> dict[str, object]:
    tokens = int(seconds * TOKENS_PER_SECOND)
    steps = [
        Step.reply(*[f"w{n} " for n in range(tokens)], delay=1 / TOKENS_PER_SECOND)
        for _ in range(replies)
    ]
    settings = Settings()
    # The ledger fake counts its writes as the Firestore adapter makes them (one a change).
    store, ledger = InMemoryConversationStore(), InMemoryTaskLedgerStore()
    queue = InMemoryTaskQueue()
    components = assemble(
        settings,
        store,
        ledger,
        InMemoryLessonStore(),
        queue,
        ScriptedProvider(steps),
        SystemClock(),
        system_prompt="bench",
        titles=False,  # (no title calls: the model is scripted)
    )
    handler = components.handler
    user = User(uid="bench")
    tasks: Counter[str] = Counter()
    conversation_id: str | None = None
    started = time.perf_counter()
    for n in range(replies):
        sent = await components.agent.send(
            user, f"message {n}", conversation_id, background=background
        )
        conversation_id = sent.conversation_id
        if sent.run is not None:
            await sent.run.execute()
        await asyncio.sleep(0.05)  # let the watchdog request (made beside the stream) land
        while queued := queue.take():  # delivered as Cloud Tasks would, due or not
            for task in queued:
                payload = TASK_PAYLOAD.validate_json(task.body)
                tasks[json.loads(task.body)["kind"]] += 1
                await handler.handle(payload)
    elapsed = time.perf_counter() - started
    assert conversation_id is not None
    document = await store.get(user.uid, conversation_id)
    assert document is not None and document.active_run is None
    assert len(document.messages) == 2 * replies
    return {
        "conversation writes": store.writes[conversation_id],
        "ledger writes": ledger.writes,
        "task calls": dict(tasks),
        "seconds": round(elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replies", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    bound = math.ceil(args.seconds / 0.5) + 1
    print(
        f"{args.replies} replies of {args.seconds:g} s ({TOKENS_PER_SECOND} tokens/s); "
        f"a reply's streaming writes are bounded by ceil({args.seconds:g} s / 500 ms) + 1 = "
        f"{bound}"
    )
    for background in (False, True):
        counts = asyncio.run(conversation(args.replies, args.seconds, background))
        mode = "202 + reply task" if background else "streamed (SSE)"
        print(f"{mode:>17}: {counts}")


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("conversation_cost"):
        main()
