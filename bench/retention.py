"""What the retention sweep costs (DESIGN §15): the time per 1,000 conversations swept
and the pages it takes, through the tasks handler (each page's next page taken from the
queue in turn, as Cloud Tasks would deliver it), with conversations spread over users.

(a) on the in-memory stores: 1,000 and 5,000 old conversations beside 100 recent ones;
(b) on the Firestore emulator, when it is there (``make bench`` runs this under
    ``tools.stack run``): 500 old conversations over 50 users (the collection-group
    query, each delete's commits and listings), beside 20 recent ones.

Old conversations are dated in 1971, so the sweep (SPARK_RETENTION_DAYS about 50
years) finds only these, whatever else the emulator holds. Printed, never asserted.

    .venv/bin/python bench/retention.py [a] [b]
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from shared.agent.conversations.retention import PAGE  # noqa: E402
from shared.clock import SystemClock  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.ids import SequentialIds  # noqa: E402
from shared.llm.scripted import ScriptedProvider  # noqa: E402
from shared.queue.memory import InMemoryTaskQueue  # noqa: E402
from shared.schemas.documents import Conversation  # noqa: E402
from shared.schemas.tasks import TASK_PAYLOAD, RetentionTask  # noqa: E402
from shared.store.base import ConversationStore  # noqa: E402
from shared.store.files import InMemoryFileStore  # noqa: E402
from shared.store.memory import (  # noqa: E402
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.wiring import Components, assemble  # noqa: E402

OLD = datetime(1971, 1, 1, tzinfo=UTC)
DAYS = 365 * 50  # the cutoff falls in the mid-1970s: only OLD is before it


def conversation(n: int, at: datetime) -> Conversation:
    return Conversation(
        id=f"c{n:06d}", participant_ids=["u"], created_at=at, updated_at=at, last_message_at=at
    )


async def fill(store: ConversationStore, users: list[str], old: int, recent: int) -> None:
    now = datetime.now(UTC)
    for n in range(old):
        await store.create(users[n % len(users)], conversation(n, OLD))
    for n in range(recent):
        await store.create(users[n % len(users)], conversation(old + n, now))


async def sweep(components: Components, queue: InMemoryTaskQueue) -> tuple[float, int]:
    """The sweep from the scheduler's call to its last page: seconds, and pages."""
    began = time.perf_counter()
    await components.handler.handle(RetentionTask())
    pages = 1
    while tasks := [t for t in queue.take() if t.name.startswith("retention-")]:
        for task in tasks:
            await components.handler.handle(TASK_PAYLOAD.validate_json(task.body))
            pages += 1
    return time.perf_counter() - began, pages


def report(label: str, old: int, seconds: float, pages: int, left: int) -> None:
    print(
        f"  {label}: {old:,} old conversations swept in {seconds:.2f} s "
        f"({seconds * 1000 / old * 1000:.0f} ms per 1,000), {pages} pages of {PAGE}, "
        f"{left} old ones left"
    )


async def in_memory(old: int, recent: int) -> None:
    store, ledger, queue = (
        InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        InMemoryTaskQueue(),
    )
    components = assemble(
        replace(Settings(), retention_days=DAYS),
        store,
        ledger,
        InMemoryLessonStore(),
        queue,
        ScriptedProvider([]),
        SystemClock(),
        ids=SequentialIds(),
        system_prompt="",
        files=InMemoryFileStore(),
        sections=ledger.sections,
    )
    await fill(store, [f"u{n}" for n in range(50)], old, recent)
    seconds, pages = await sweep(components, queue)
    left = len(await store.untouched(datetime(1972, 1, 1, tzinfo=UTC), old))
    report("in memory", old, seconds, pages, left)


async def on_firestore(old: int, recent: int) -> None:
    from shared.store.firestore import connect

    stores = connect("demo-spark")
    queue = InMemoryTaskQueue()
    components = assemble(
        replace(Settings(), retention_days=DAYS),
        stores.conversations,
        stores.ledgers,
        stores.lessons,
        queue,
        ScriptedProvider([]),
        SystemClock(),
        ids=SequentialIds(),
        system_prompt="",
        files=InMemoryFileStore(),
        families=stores.families,
        sections=stores.sections,
        settings_store=stores.settings,
        provenance=stores.provenance,
        openings=stores.openings,
        accounts=stores.accounts,
    )
    users = [f"bench-{secrets.token_hex(4)}" for _ in range(50)]
    await fill(stores.conversations, users, old, recent)
    seconds, pages = await sweep(components, queue)
    left = len(await stores.conversations.untouched(datetime(1972, 1, 1, tzinfo=UTC), old))
    report("Firestore emulator", old, seconds, pages, left)
    stores.close()


async def main(parts: list[str]) -> None:
    if "a" in parts:
        print("(a) the retention sweep on the in-memory stores")
        for old in (1_000, 5_000):
            await in_memory(old, 100)
    if "b" in parts:
        print("(b) the retention sweep on the Firestore emulator")
        if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
            print("  skipped: no emulator (run it under `python -m tools.stack run --`)")
            return
        await on_firestore(500, 20)


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("retention"):
        asyncio.run(main(sys.argv[1:] or ["a", "b"]))
