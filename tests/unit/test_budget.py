"""The user's budget (``shared/budget/service.Budget``) on the in-memory ledger: each
change one transaction of the ledger, running the budget's pure rules."""

from __future__ import annotations

import pytest

from shared.budget.allowance import UserLimits
from shared.budget.service import Budget
from shared.budget.voice_grants import VoiceLimits
from shared.clock import ManualClock
from shared.errors import RateLimited, TaskCancelled
from shared.schemas.server import TaskLedger, TaskRecord
from shared.store.memory import InMemoryTaskLedgerStore

LIMITS = UserLimits(runs_at_once=2, daily_tokens=1_000, daily_uploads=1)


def _budget() -> tuple[Budget, InMemoryTaskLedgerStore, ManualClock]:
    ledger, clock = InMemoryTaskLedgerStore(), ManualClock()
    return Budget(ledger, clock, LIMITS, VoiceLimits(sessions_per_day=1)), ledger, clock


def _running(clock: ManualClock, task_id: str, *, cancel: bool) -> TaskRecord:
    now = clock.now()
    return TaskRecord(
        task_id=task_id,
        conversation_id="c1",
        tool_call_id="call_1",
        tool="make_lesson",
        display_text="Making a lesson",
        seq=0,
        status="running",
        cancel_requested=cancel or None,
        created_at=now,
        updated_at=now,
    )


async def test_budget_settles_a_reservation_to_what_the_call_used() -> None:
    budget, ledger, _ = _budget()
    meter = budget.meter("alice")
    reservation = await meter.reserve(1_000, "chat")
    held = await ledger.get("alice")
    assert list(held.reservations) == [reservation]
    with pytest.raises(RateLimited, match="today's allowance"):
        await meter.reserve(10, "chat")  # what is reserved counts as spent
    await meter.settle(reservation, 40)
    settled = await ledger.get("alice")
    assert settled.reservations == {}
    assert settled.usage is not None and settled.usage.tokens == 40
    await meter.settle(reservation, 40)  # settling again counts nothing more
    assert (await ledger.get("alice")).usage == settled.usage


async def test_budget_refuses_a_cancelled_tasks_reservation_and_writes_nothing() -> None:
    budget, ledger, clock = _budget()
    tasks = {"t1": _running(clock, "t1", cancel=True), "t2": _running(clock, "t2", cancel=False)}
    await ledger.mutate("alice", lambda _: TaskLedger(tasks=tasks))
    writes = ledger.writes
    with pytest.raises(TaskCancelled):
        await budget.meter("alice", "t1").reserve(10, "task")
    assert ledger.writes == writes and (await ledger.get("alice")).reservations == {}
    reservation = await budget.meter("alice", "t2").reserve(10, "task")
    assert list((await ledger.get("alice")).reservations) == [reservation]


async def test_budget_counts_voice_sessions_and_uploads_and_gives_them_back() -> None:
    budget, ledger, _ = _budget()
    await budget.grant_voice("alice", "vs_1", "openai", "m")
    with pytest.raises(RateLimited, match="voice"):
        await budget.grant_voice("alice", "vs_2", "openai", "m")
    await budget.withdraw_voice("alice", "vs_1")  # its secret was never minted
    await budget.grant_voice("alice", "vs_2", "openai", "m")
    assert list((await ledger.get("alice")).voice) == ["vs_2"]
    await budget.admit_upload("alice")
    with pytest.raises(RateLimited, match="files"):
        await budget.admit_upload("alice")
    await budget.withdraw_uploads("alice", 1)
    await budget.admit_upload("alice")
    usage = (await ledger.get("alice")).usage
    assert usage is not None and (usage.uploads, usage.voice_sessions) == (1, 1)


async def test_budget_refuses_once_todays_tokens_are_spent_until_midnight() -> None:
    budget, _, clock = _budget()
    await budget.check_tokens("alice")
    await budget.spend("alice", 1_000)
    with pytest.raises(RateLimited) as refused:
        await budget.check_tokens("alice")
    await clock.advance(refused.value.retry_after)
    await budget.check_tokens("alice")  # a new day
