"""Two processes' stores on one emulator: what one process remembers of a document must
never decide, alone, to skip or drop work the other process wrote since.

Each ``connect`` is a separate client with its own remembered versions, as two
instances of a function are.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.schemas.server import TaskLedger, TaskRecord
from shared.store.firestore import FirestoreStores, connect
from shared.tasks import ledger as ledgers
from tests.e2e.conftest import PROJECT
from tests.e2e.test_store_contract import conversation

pytestmark = pytest.mark.emulator

NOW = datetime(2026, 3, 1, tzinfo=UTC)
POLICY = ledgers.LedgerPolicy(max_running=3, lease=timedelta(seconds=60))


@pytest.fixture
async def two(emulators: object) -> AsyncIterator[tuple[FirestoreStores, FirestoreStores]]:
    first, second = connect(PROJECT), connect(PROJECT)
    yield first, second
    first.close()
    second.close()


def record(call: str) -> TaskRecord:
    return TaskRecord(
        task_id=f"task_{call}",
        conversation_id="c",
        tool_call_id=call,
        tool="create_lesson",
        display_text="Writing a lesson",
        seq=0,
        status="queued",
        created_at=NOW,
        updated_at=NOW,
    )


async def submit(stores: FirestoreStores, uid: str, call: str) -> TaskLedger:
    return await stores.ledgers.mutate(
        uid, lambda led: ledgers.submit(led, record(call), NOW, POLICY)[0]
    )


async def claim(stores: FirestoreStores, uid: str, task_id: str, attempt: int) -> str:
    _, verdict = await stores.ledgers.apply(
        uid, lambda led: ledgers.claim(led, task_id, attempt, NOW, POLICY)
    )
    return verdict


async def test_a_task_granted_by_another_process_is_claimed_not_dropped(
    two: tuple[FirestoreStores, FirestoreStores],
) -> None:
    # The tasks process ran the user's first task and remembers the ledger it wrote;
    # the api then granted a second task. Its delivery reaches the tasks process.
    tasks, api = two
    uid = f"u{secrets.token_hex(4)}"
    await submit(tasks, uid, "first")
    assert await claim(tasks, uid, "task_first", 1) == "run"
    await submit(api, uid, "second")
    assert await claim(tasks, uid, "task_second", 1) == "run"
    # ...and a redelivery of it, anywhere, is now busy, not run again.
    assert await claim(api, uid, "task_second", 1) == "busy"
    assert await claim(tasks, uid, "task_second", 1) == "busy"


async def test_a_truly_stale_delivery_is_still_stale_on_a_fresh_read(
    two: tuple[FirestoreStores, FirestoreStores],
) -> None:
    tasks, api = two
    uid = f"u{secrets.token_hex(4)}"
    await submit(api, uid, "only")
    assert await claim(tasks, uid, "task_only", 2) == "stale"  # no attempt 2 was granted
    assert await claim(tasks, uid, "task_missing", 1) == "stale"


async def test_a_no_op_change_on_a_remembered_conversation_is_judged_on_a_fresh_one(
    two: tuple[FirestoreStores, FirestoreStores],
) -> None:
    # A change that finds nothing to do on the copy one process remembers must look
    # again when another process wrote since: here "make the title A" after the other
    # process made it B.
    first, second = two
    uid = f"u{secrets.token_hex(4)}"
    created = conversation().model_copy(update={"title": "A"})
    await first.conversations.create(uid, created)
    await second.conversations.mutate(
        uid, created.id, lambda c: c.model_copy(update={"title": "B"})
    )
    updated = await first.conversations.mutate(
        uid, created.id, lambda c: c.model_copy(update={"title": "A"})
    )
    assert updated.title == "A"
    stored = await second.conversations.get(uid, created.id)
    assert stored is not None and stored.title == "A"
