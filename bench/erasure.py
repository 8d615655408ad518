"""What erasing an account costs (DESIGN §15): the time, writes and pages of an
erasure per 1,000 of the account's documents, through the erasure's own task (its
deliveries taken from the queue in turn, as Cloud Tasks would make them).

(a) on the in-memory stores: accounts of 1,000 and 10,000 documents (conversations,
    lessons, task sections) and 500 files;
(b) on the Firestore emulator, when it is there (``make bench`` runs this under
    ``tools.stack run``): an account of 1,000 documents (no files: the Storage emulator
    is another process's cost).

Writes are those a commit makes: each document deleted once and the deletion record once
per step (a page, or a move to the next step).

    .venv/bin/python bench/erasure.py [a] [b]
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from shared.clock import SystemClock  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.ids import SequentialIds  # noqa: E402
from shared.llm.scripted import ScriptedProvider  # noqa: E402
from shared.queue.memory import InMemoryTaskQueue  # noqa: E402
from shared.schemas.deletions import Deletion, deletion_id_of  # noqa: E402
from shared.schemas.documents import Conversation, Lesson  # noqa: E402
from shared.schemas.tasks import TASK_PAYLOAD  # noqa: E402
from shared.store.accounts import AccountStore  # noqa: E402
from shared.store.files import InMemoryFileStore  # noqa: E402
from shared.store.memory import (  # noqa: E402
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.store.memory.accounts import InMemoryAccountStore  # noqa: E402
from shared.wiring import Components, assemble  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BODY = "<lesson>\n<h1>Tides</h1>\n<p>The sea rises and falls twice a day.</p>\n</lesson>"


def conversation(n: int) -> Conversation:
    return Conversation(
        id=f"c{n:06d}", participant_ids=["u"], created_at=T0, updated_at=T0, last_message_at=T0
    )


def lesson(n: int) -> Lesson:
    return Lesson(
        id=f"les{n:06d}", title="Tides", body=BODY, version=1, created_at=T0, updated_at=T0
    )


async def erase(components: Components, queue: InMemoryTaskQueue, uid: str) -> tuple[float, int]:
    """The erasure of ``uid`` from its request to its end: seconds, and deliveries."""
    began, deliveries = time.perf_counter(), 0
    await components.agent.erase_account(uid)
    while tasks := queue.take():
        for task in tasks:
            await components.handler.handle(TASK_PAYLOAD.validate_json(task.body))
            deliveries += 1
    return time.perf_counter() - began, deliveries


def report(
    label: str,
    documents: int,
    files: int,
    seconds: float,
    done: Deletion,
    writes: int,
    deliveries: int,
) -> None:
    per = 1000 / documents
    print(
        f"  {label}: {documents:,} documents and {files} files erased in {seconds:.2f} s "
        f"({seconds * per * 1000:.0f} ms per 1,000 documents); {writes:,} writes "
        f"({writes * per:,.0f} per 1,000 documents), {done.counts.pages} pages, "
        f"{deliveries} task deliveries"
    )


async def in_memory(documents: int, files: int) -> None:
    conversations, ledger, lessons = (
        InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
    )
    store, queue = InMemoryFileStore(), InMemoryTaskQueue()
    components = assemble(
        Settings(),
        conversations,
        ledger,
        lessons,
        queue,
        ScriptedProvider([]),
        SystemClock(),
        ids=SequentialIds(),
        system_prompt="",
        files=store,
        sections=ledger.sections,
        titles=False,  # (no title calls: the model is scripted)
    )
    uid = "u"
    for n in range(documents // 2):
        await conversations.create(uid, conversation(n))
    for n in range(documents - documents // 2 - 1):
        await lessons.create(uid, lesson(n))  # each with the progress summary: +1 at the end
    for n in range(files):
        await store.write(f"{uid}/uploads/f{n:05d}.png", b"png", "image/png")
    accounts = components.deps.tombstones._accounts  # type: ignore[attr-defined]
    assert isinstance(accounts, InMemoryAccountStore)
    assert len(await accounts.listed(uid, documents * 2)) == documents
    seconds, deliveries = await erase(components, queue, uid)
    done = await accounts.deletion(deletion_id_of(uid))
    assert done is not None and done.step == "finished" and done.counts.documents == documents
    report("in memory", documents, files, seconds, done, accounts.writes, deliveries)


async def on_firestore(documents: int) -> None:
    from google.cloud import firestore

    from shared.store.firestore import connect

    stores = connect("demo-spark")
    uid = f"bench-{secrets.token_hex(4)}"
    sync = firestore.Client(project="demo-spark")
    for start in range(0, documents, 400):
        batch = sync.batch()
        for n in range(start, min(documents, start + 400)):
            ref = sync.collection(uid).document("client").collection("lessons").document(f"l{n}")
            batch.set(ref, lesson(n).to_firestore())
        batch.commit()
    queue = InMemoryTaskQueue()
    components = assemble(
        Settings(),
        stores.conversations,
        stores.ledgers,
        stores.lessons,
        queue,
        ScriptedProvider([]),
        SystemClock(),
        ids=SequentialIds(),
        system_prompt="",
        families=stores.families,
        sections=stores.sections,
        settings_store=stores.settings,
        provenance=stores.provenance,
        openings=stores.openings,
        accounts=stores.accounts,
        titles=False,  # (no title calls: the model is scripted)
    )
    seconds, deliveries = await erase(components, queue, uid)
    accounts: AccountStore = stores.accounts
    done = await accounts.deletion(deletion_id_of(uid))
    assert done is not None and done.step == "finished"
    writes = done.counts.documents + done.version + 1
    report("Firestore emulator", documents, 0, seconds, done, writes, deliveries)
    stores.close()
    sync.close()


async def main(parts: list[str]) -> None:
    if "a" in parts:
        print("(a) an erasure on the in-memory stores")
        for documents in (1_000, 10_000):
            await in_memory(documents, 500)
    if "b" in parts:
        print("(b) an erasure on the Firestore emulator")
        if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
            print("  skipped: no emulator (run it under `python -m tools.stack run --`)")
            return
        await on_firestore(1_000)


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("erasure"):
        asyncio.run(main(sys.argv[1:] or ["a", "b"]))
