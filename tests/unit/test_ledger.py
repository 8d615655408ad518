"""The pure ledger changes: admission in order, one delivery per attempt, leases that
lapse into the next attempt, retries that keep their slot, and pruning of old records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.schemas.server import TaskLedger, TaskRecord
from shared.tasks import ledger as ledgers
from shared.tasks.ledger import LedgerPolicy

T0 = datetime(2025, 1, 6, 9, 0, 0, tzinfo=UTC)
POLICY = LedgerPolicy(max_running=3, lease=timedelta(seconds=90))  # 50 finished kept
LEASE = POLICY.lease


def record(task_id: str, at: datetime = T0) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        conversation_id="c1",
        tool_call_id=f"call-{task_id}",
        tool="make_lesson",
        display_text="Creating lesson",
        seq=0,
        status="queued",
        created_at=at,
        updated_at=at,
    )


def submitted(*task_ids: str, at: datetime = T0, policy: LedgerPolicy = POLICY) -> TaskLedger:
    ledger = TaskLedger()
    for task_id in task_ids:
        ledger, _ = ledgers.submit(ledger, record(task_id, at), at, policy)
    return ledger


def statuses(ledger: TaskLedger) -> dict[str, str]:
    return {k: r.status for k, r in ledger.tasks.items()}


def claimed(ledger: TaskLedger, task_id: str, at: datetime = T0) -> TaskLedger:
    attempt = ledger.tasks[task_id].attempt
    ledger, outcome = ledgers.claim(ledger, task_id, attempt, at, POLICY)
    assert outcome == "run"
    return ledger


def test_submit_grants_up_to_max_running_in_seq_order_and_queues_the_rest() -> None:
    ledger = TaskLedger()
    granted: list[str] = []
    for task_id in ("a", "b", "c", "d", "e"):
        ledger, dispatch = ledgers.submit(ledger, record(task_id), T0, POLICY)
        granted += [r.task_id for r in dispatch]

    assert granted == ["a", "b", "c"]
    assert statuses(ledger) == {
        "a": "running",
        "b": "running",
        "c": "running",
        "d": "queued",
        "e": "queued",
    }
    assert [ledger.tasks[k].seq for k in "abcde"] == [0, 1, 2, 3, 4]
    assert ledger.next_seq == 5
    a = ledger.tasks["a"]
    assert (a.attempt, a.started, a.lease_expires_at) == (1, False, T0 + LEASE)
    assert ledger.tasks["d"].attempt == 0


def test_submit_of_the_same_task_id_twice_changes_nothing() -> None:
    ledger = submitted("a")

    again, dispatch = ledgers.submit(ledger, record("a"), T0 + timedelta(seconds=5), POLICY)

    assert dispatch == []
    assert again == ledger


def test_submit_of_a_queued_task_id_again_neither_grants_nor_requeues_it() -> None:
    ledger = submitted("a", "b", "c", "d")

    again, dispatch = ledgers.submit(ledger, record("d"), T0, POLICY)

    assert dispatch == []
    assert again == ledger
    assert again.tasks["d"].status == "queued"


def test_claim_runs_the_first_delivery_and_marks_the_attempt_started() -> None:
    ledger = submitted("a")
    now = T0 + timedelta(seconds=10)

    ledger, outcome = ledgers.claim(ledger, "a", 1, now, POLICY)

    assert outcome == "run"
    a = ledger.tasks["a"]
    assert (a.started, a.lease_expires_at) == (True, now + LEASE)


def test_claim_of_a_concurrent_second_delivery_is_busy() -> None:
    ledger = claimed(submitted("a"), "a")

    again, outcome = ledgers.claim(ledger, "a", 1, T0 + timedelta(seconds=1), POLICY)

    assert outcome == "busy"
    assert again == ledger


def test_claim_of_an_old_attempt_is_stale() -> None:
    ledger = submitted("a")
    ledger, _ = ledgers.reschedule(ledger, "a", 1, T0, timedelta(seconds=5), POLICY)

    again, outcome = ledgers.claim(ledger, "a", 1, T0, POLICY)

    assert outcome == "stale"
    assert again == ledger


def test_claim_of_a_finished_or_unknown_task_is_stale() -> None:
    ledger = claimed(submitted("a"), "a")
    ledger, _ = ledgers.finish(ledger, "a", 1, "completed", T0, POLICY)

    assert ledgers.claim(ledger, "a", 1, T0, POLICY)[1] == "stale"
    assert ledgers.claim(ledger, "nobody", 1, T0, POLICY)[1] == "stale"


def test_claim_of_a_queued_task_is_stale() -> None:
    ledger = submitted("a", "b", "c", "d")

    assert ledgers.claim(ledger, "d", 0, T0, POLICY)[1] == "stale"
    assert ledgers.claim(ledger, "d", 1, T0, POLICY)[1] == "stale"


def test_claim_takes_over_a_started_attempt_whose_lease_lapsed() -> None:
    ledger = claimed(submitted("a"), "a")
    later = T0 + LEASE + timedelta(seconds=1)

    ledger, outcome = ledgers.claim(ledger, "a", 1, later, POLICY)

    assert outcome == "run"
    a = ledger.tasks["a"]
    assert (a.attempt, a.started, a.lease_expires_at) == (1, True, later + LEASE)


def test_claim_at_the_exact_lease_expiry_takes_over() -> None:
    ledger = claimed(submitted("a"), "a")

    assert ledgers.claim(ledger, "a", 1, T0 + LEASE, POLICY)[1] == "run"


def test_grant_regrants_a_lapsed_running_record_as_the_next_attempt() -> None:
    ledger = claimed(submitted("a", "b"), "a")
    later = T0 + LEASE + timedelta(seconds=1)

    ledger, dispatch = ledgers.grant(ledger, later, POLICY)

    assert [(r.task_id, r.attempt) for r in dispatch] == [("a", 2), ("b", 2)]
    a = ledger.tasks["a"]
    assert (a.status, a.attempt, a.started, a.lease_expires_at) == (
        "running",
        2,
        False,
        later + LEASE,
    )
    assert ledgers.claim(ledger, "a", 1, later, POLICY)[1] == "stale"
    assert ledgers.claim(ledger, "a", 2, later, POLICY)[1] == "run"


def test_grant_leaves_running_records_with_live_leases_alone() -> None:
    ledger = claimed(submitted("a", "b", "c", "d"), "a")

    again, dispatch = ledgers.grant(ledger, T0 + LEASE - timedelta(seconds=1), POLICY)

    assert dispatch == []
    assert again == ledger


def test_grant_does_not_start_queued_tasks_while_lapsed_ones_hold_the_slots() -> None:
    ledger = submitted("a", "b", "c", "d")

    ledger, dispatch = ledgers.grant(ledger, T0 + LEASE, POLICY)

    assert sorted(r.task_id for r in dispatch) == ["a", "b", "c"]
    assert ledger.tasks["d"].status == "queued"


def test_finish_frees_the_slot_and_grants_the_oldest_queued_task() -> None:
    ledger = submitted("a", "b", "c", "d", "e")
    ledger = claimed(ledger, "b")
    now = T0 + timedelta(seconds=30)

    ledger, dispatch = ledgers.finish(ledger, "b", 1, "completed", now, POLICY)

    assert [(r.task_id, r.attempt) for r in dispatch] == [("d", 1)]
    assert statuses(ledger) == {
        "a": "running",
        "b": "completed",
        "c": "running",
        "d": "running",
        "e": "queued",
    }
    b = ledger.tasks["b"]
    assert (b.started, b.lease_expires_at, b.updated_at) == (False, None, now)


def test_finish_records_a_failure_and_its_error() -> None:
    ledger = claimed(submitted("a"), "a")

    ledger, _ = ledgers.finish(ledger, "a", 1, "failed", T0, POLICY, error="timed out")

    assert (ledger.tasks["a"].status, ledger.tasks["a"].error) == ("failed", "timed out")


def test_finish_by_a_superseded_attempt_changes_nothing() -> None:
    ledger = submitted("a")
    ledger, _ = ledgers.reschedule(ledger, "a", 1, T0, timedelta(seconds=5), POLICY)

    again, dispatch = ledgers.finish(ledger, "a", 1, "completed", T0, POLICY)

    assert dispatch == []
    assert again == ledger
    assert again.tasks["a"].status == "running"


def test_reschedule_keeps_the_slot_bumps_the_attempt_and_sets_retry_at() -> None:
    ledger = claimed(submitted("a", "b", "c", "d"), "a")
    now = T0 + timedelta(seconds=20)
    delay = timedelta(seconds=4)

    ledger, retry = ledgers.reschedule(ledger, "a", 1, now, delay, POLICY, error="flaky")

    assert retry is not None
    assert retry == ledger.tasks["a"]
    assert (retry.status, retry.attempt, retry.started) == ("running", 2, False)
    assert retry.retry_at == now + delay
    assert retry.lease_expires_at == now + delay + LEASE
    assert retry.error == "flaky"
    assert ledger.tasks["d"].status == "queued"
    assert ledgers.grant(ledger, now, POLICY)[1] == []


def test_reschedule_of_a_superseded_attempt_changes_nothing() -> None:
    ledger = submitted("a")
    ledger, _ = ledgers.reschedule(ledger, "a", 1, T0, timedelta(seconds=5), POLICY)

    again, retry = ledgers.reschedule(ledger, "a", 1, T0, timedelta(seconds=5), POLICY)

    assert retry is None
    assert again == ledger


def test_renew_extends_the_lease_of_the_current_attempt() -> None:
    ledger = claimed(submitted("a"), "a")
    until = T0 + timedelta(minutes=5)

    ledger = ledgers.renew(ledger, "a", 1, until)

    assert ledger.tasks["a"].lease_expires_at == until


def test_renew_of_a_superseded_attempt_changes_nothing() -> None:
    ledger = claimed(submitted("a"), "a")
    ledger, _ = ledgers.grant(ledger, T0 + LEASE, POLICY)

    again = ledgers.renew(ledger, "a", 1, T0 + timedelta(hours=1))

    assert again == ledger
    assert again.tasks["a"].lease_expires_at == T0 + LEASE + LEASE


def test_prune_keeps_at_most_keep_finished_and_never_drops_live_records() -> None:
    policy = LedgerPolicy(max_running=2, lease=LEASE, keep_finished=2)
    ledger = submitted("f1", "f2", "f3", "f4", "live-1", "live-2", "queued", policy=policy)
    for i, task_id in enumerate(("f1", "f2", "f3", "f4")):
        now = T0 + timedelta(seconds=i)
        ledger, _ = ledgers.finish(ledger, task_id, 1, "completed", now, policy)

    assert statuses(ledger) == {
        "f3": "completed",
        "f4": "completed",
        "live-1": "running",
        "live-2": "running",
        "queued": "queued",
    }


def test_cancel_frees_granted_and_queued_tasks_but_not_started_ones() -> None:
    policy = LedgerPolicy(max_running=1, lease=LEASE)
    ledger = submitted("a", "b", "c", policy=policy)
    ledger, _ = ledgers.claim(ledger, "a", 1, T0, policy)

    ledger, granted = ledgers.cancel(ledger, ["a", "b"], T0, policy)

    assert statuses(ledger) == {"a": "running", "b": "cancelled", "c": "queued"}
    assert granted == []
    ledger, granted = ledgers.finish(ledger, "a", 1, "completed", T0, policy)
    assert [r.task_id for r in granted] == ["c"]


def test_cancel_of_a_granted_unclaimed_attempt_frees_its_slot_for_the_next() -> None:
    policy = LedgerPolicy(max_running=1, lease=LEASE)
    ledger = submitted("a", "b", policy=policy)

    ledger, granted = ledgers.cancel(ledger, ["a"], T0, policy)

    assert statuses(ledger) == {"a": "cancelled", "b": "running"}
    assert [r.task_id for r in granted] == ["b"]
    assert ledgers.claim(ledger, "a", 1, T0, policy)[1] == "stale"
