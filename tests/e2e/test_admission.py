"""Run slots, waiting runs and the day's tokens in the Firestore ledger, taken and given
back by two processes (two clients, each remembering its own copy) on the emulator."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta

import pytest

from shared.agent.run.slot import RunSlot
from shared.budget.allowance import UserLimits
from shared.budget.service import Budget
from shared.clock import SystemClock
from shared.errors import RateLimited, SlotsTaken
from shared.queue.memory import InMemoryTaskQueue
from shared.store.firestore import FirestoreStores, connect
from shared.store.slots import RunSlots
from shared.tasks.ledger import LedgerPolicy
from shared.tasks.scheduler import TaskScheduler
from tests.e2e.conftest import PROJECT

pytestmark = pytest.mark.emulator

LIMITS = UserLimits(runs_at_once=1, daily_tokens=1000)


class Process:
    """One process's scheduler and run slots, on its own client."""

    def __init__(self, stores: FirestoreStores, queue: InMemoryTaskQueue) -> None:
        self.scheduler = TaskScheduler(
            stores.ledgers,
            queue,
            SystemClock(),
            LedgerPolicy(max_running=3, lease=timedelta(minutes=2)),
            timedelta(seconds=30),
        )
        self.budget = Budget(stores.ledgers, SystemClock(), LIMITS)
        self._slots = RunSlots(stores.ledgers, stores.openings, SystemClock(), LIMITS)

    async def admit_run(
        self, user_id: str, run_id: str, conversation_id: str, wait: bool = False
    ) -> None:
        await self._slot(user_id, run_id).take(conversation_id, wait=wait)

    async def release_run(self, user_id: str, run_id: str, tokens: int) -> None:
        await self._slot(user_id, run_id).release(tokens)

    def _slot(self, user_id: str, run_id: str) -> RunSlot:
        return RunSlot(self._slots, self.scheduler, user_id, run_id)


@pytest.fixture
def two(emulators: object) -> Iterator[tuple[FirestoreStores, FirestoreStores]]:
    first, second = connect(PROJECT), connect(PROJECT)
    yield first, second
    first.close()
    second.close()


async def test_e2e_a_waiting_run_is_woken_by_the_process_that_frees_the_slot(
    two: tuple[FirestoreStores, FirestoreStores],
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    queue = InMemoryTaskQueue()
    api, tasks = Process(two[0], queue), Process(two[1], queue)

    await api.admit_run(uid, "run_a", "c1")
    with pytest.raises(SlotsTaken):  # a new message is refused, and does not wait
        await tasks.admit_run(uid, "run_x", "c3")
    with pytest.raises(SlotsTaken):  # a queued run waits
        await tasks.admit_run(uid, "run_b", "c2", wait=True)
    await api.admit_run(uid, "run_f", "c1")  # c1's follow-up joins its slot
    await api.release_run(uid, "run_a", 300)
    assert queue.take() == []  # run_f still holds the slot
    await tasks.release_run(uid, "run_f", 200)  # ends on the other process
    (woken,) = queue.take()
    assert woken.name == "reply-run_b-after-run_f"

    await api.admit_run(uid, "run_b", "c2", wait=True)
    ledger = await two[1].ledgers.get(uid)
    assert list(ledger.runs) == ["c2"] and ledger.runs["c2"].members == ["run_b"]
    assert ledger.waiting == {}
    assert ledger.usage is not None and ledger.usage.tokens == 500


async def test_e2e_the_days_tokens_count_a_task_tools_calls_and_refuse_the_next(
    two: tuple[FirestoreStores, FirestoreStores],
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    queue = InMemoryTaskQueue()
    api, tasks = Process(two[0], queue), Process(two[1], queue)
    meter = tasks.budget.meter(uid)
    reservation = await meter.reserve(300, "task")
    await meter.settle(reservation, 1_100)
    with pytest.raises(RateLimited, match="today's allowance"):
        await meter.reserve(300, "task")
    with pytest.raises(RateLimited, match="today's allowance"):
        await api.admit_run(uid, "run_a", "c1", wait=True)
    assert (await two[0].ledgers.get(uid)).waiting == {}  # refused for good: no waiting
