"""Cost of appending to a conversation with roll-over, and writes per streamed reply.

Run with ``make bench`` (it starts the emulators). Prints, side by side in one run:

(a) client CPU and time per appended turn (a user message and a reply, then the roll-over
    check, moving older messages into ``archive/`` when due), in a conversation with 10
    messages of history and in one with 10,000 (most of them rolled over already);
(b) the writes a streamed reply makes against its bound, ceil(duration / 500 ms) + 1.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from shared.schemas.documents import (  # noqa: E402
    ArchiveMarker,
    ArchiveSegment,
    ContentPart,
    Conversation,
    Message,
)
from shared.store.archive import roll_over  # noqa: E402
from shared.store.firestore import connect  # noqa: E402

BUDGET = 256 * 1024
TEXT = "A short exchange about tides, the moon and year 5 science lessons. " * 4


def turn(n: int, now: datetime) -> list[Message]:
    return [
        Message(
            id=f"m{n}u",
            role="user",
            created_at=now,
            status="complete",
            content=[ContentPart.of_text(TEXT)],
        ),
        Message(
            id=f"m{n}a",
            role="assistant",
            created_at=now,
            status="complete",
            content=[ContentPart.of_text(TEXT * 2)],
        ),
    ]


async def seeded(history: int) -> tuple[object, str, int]:
    """A conversation with ``history`` messages: the oldest already in archive segments."""
    stores = connect(os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-spark"))
    store = stores.conversations
    now = datetime.now(UTC)
    messages = [m for n in range(history // 2) for m in turn(n, now)]
    live: list[Message] = []
    size = 0
    for message in reversed(messages):
        size += len(message.text.encode()) + 200
        if size > BUDGET * 3 // 4:
            break
        live.insert(0, message)
    archived = messages[: len(messages) - len(live)]
    uid, cid = "bench-rollover", f"c{history}-{time.time_ns()}"
    segments = -(-len(archived) // 300)  # 300 messages a segment
    marker = (
        ArchiveMarker(count=len(archived), newest_id=archived[-1].id, segments=segments)
        if archived
        else None
    )
    # The conversation first: an archive segment is written only beside a conversation
    # that exists (a deleted one's late roll-over must not make it again).
    await store.create(
        uid,
        Conversation(
            id=cid,
            participant_ids=[uid],
            created_at=now,
            updated_at=now,
            last_message_at=now,
            messages=live,
            archived=marker,
        ),
    )
    for number, start in enumerate(range(0, len(archived), 300), start=1):
        chunk = archived[start : start + 300]
        await store.archive(
            uid,
            ArchiveSegment(conversation_id=cid, segment=number, messages=chunk, created_at=now),
        )
    return stores, cid, len(live)


@dataclass
class Side:
    """One conversation appended to, with what its appends cost so far."""

    stores: Any
    cid: str
    live: int
    conversation: Any = None
    cpu: float = 0.0
    wall: float = 0.0
    moved: int = 0


async def append_costs(histories: tuple[int, ...], appends: int) -> dict[int, Side]:
    """Each history's appends, taken in turn (one to each, then again), so that the
    machine's drift during the run (the emulator warming, other work) falls on every
    side alike: measured one side after the other, the ratio swung from 1.03x to 1.92x
    between runs of the same code."""
    uid, now = "bench-rollover", datetime.now(UTC)
    sides = {}
    for history in histories:
        stores, cid, live = await seeded(history)
        sides[history] = Side(stores, cid, live)
        sides[history].conversation = await stores.conversations.get(uid, cid)
    for n in range(appends):
        for side in sides.values():
            store = side.stores.conversations
            pair = turn(10_000_000 + n, now)
            cpu, wall = time.process_time(), time.perf_counter()
            conversation = await store.mutate(
                uid,
                side.cid,
                lambda c, p=pair: c.model_copy(update={"messages": [*c.messages, *p]}),
            )
            before = len(conversation.messages)
            side.conversation = await roll_over(store, uid, conversation, BUDGET, 20, now)
            side.cpu += time.process_time() - cpu
            side.wall += time.perf_counter() - wall
            side.moved += before - len(side.conversation.messages)
    for side in sides.values():
        side.stores.close()
    return sides


async def writes_per_reply(seconds: float) -> tuple[int, int]:
    from shared.auth.base import User
    from shared.config import Settings
    from shared.llm.scripted import ScriptedProvider, Step
    from shared.queue.memory import InMemoryTaskQueue
    from shared.store.memory import (
        InMemoryConversationStore,
        InMemoryLessonStore,
        InMemoryTaskLedgerStore,
    )
    from shared.wiring import assemble

    tokens = int(seconds * 50)
    provider = ScriptedProvider([Step.reply(*[f"t{n} " for n in range(tokens)], delay=0.02)])
    store = InMemoryConversationStore()
    components = assemble(
        Settings(),
        store,
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
        InMemoryTaskQueue(),
        provider,
        __import__("shared.clock", fromlist=["SystemClock"]).SystemClock(),
        system_prompt="bench",
        titles=False,  # (no title calls: the model is scripted)
    )
    sent = await components.agent.send(User(uid="bench"), "go", None)
    assert sent.run is not None
    started = time.perf_counter()
    await sent.run.execute()
    duration = time.perf_counter() - started
    writes = store.writes[sent.conversation_id] - 1  # the write that opened the run
    return writes, math.ceil(duration / 0.5) + 1


async def main() -> None:
    appends = 150
    print(f"rollover: {os.cpu_count()} cores, Firestore emulator on this machine")
    print(
        "(a) per appended turn (user + reply, then the roll-over check), "
        f"mean of {appends}, the two taken in turn:"
    )
    results = {}
    for history, side in (await append_costs((10, 10_000), appends)).items():
        cpu, wall = side.cpu / appends, side.wall / appends
        results[history] = cpu
        print(
            f"    {history:6d} messages of history ({side.live} live): CPU {cpu * 1e3:6.2f} ms "
            f"| time {wall * 1e3:6.2f} ms | {side.moved} messages rolled over meanwhile"
        )
    from bench.results import target

    ratio = results[10_000] / results[10]
    target(
        "roll-over: CPU of a turn at 10,000 messages against 10",
        f"{ratio:.2f}x",
        "<= 1.5x",
        ratio <= 1.5,
    )
    writes, bound = await writes_per_reply(3.0)
    print(f"(b) a 3 s streamed reply made {writes} writes; bound ceil(3 s / 500 ms) + 1 = {bound}")


if __name__ == "__main__":
    from bench.results import recorded

    if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        raise SystemExit("run through `make bench` (it starts the emulators)")
    with recorded("rollover"):
        asyncio.run(main())
