"""Pure changes to a user's task ledger: admission, claims, leases, retries, release.

Every function takes the ledger and returns a new one plus what the caller must do
(dispatch these attempts, run or skip this delivery). They run inside
``TaskLedgerStore.mutate`` and may run more than once, so none has side effects.

How a task moves::

    queued ──grant──▶ running(attempt n, not started) ──claim──▶ running(started)
      ▲                    ▲                                         │
      │                    └──── lease lapsed / reschedule (n+1) ────┤
      └── waits while the user has ``max_running`` running tasks      ▼
                                                  completed | failed | cancelled
      ▲                                                              │
      └──── answered (submit again) ◀── waiting_on_user ◀── wait ────┘

A slot is held from grant to finish, or to ``wait`` (a question to the user); a task
not yet claimed, or waiting, is cancelled at once (``cancel``), a running one at its
tool's next step (``request_cancel``, then its handler's ``finish``). A running task
whose lease lapsed (its handler died, or it was granted but never dispatched) is granted
again as the next attempt by the next change to the ledger, so nothing stays ``running``
for ever.

Runs at once, the token budget and uploads are ``runs``'; live-audio sessions ``voice``'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from shared.errors import (
    RateLimited,
)
from shared.schemas.documents import TaskStatus
from shared.schemas.server import (
    TaskLedger,
    TaskRecord,
)

Claim = Literal["run", "busy", "stale"]
"""``run``: this delivery owns the attempt. ``busy``: another delivery holds it (retry
later). ``stale``: the attempt is over or superseded (acknowledge and do nothing)."""


FINISHED = ("completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class LedgerPolicy:
    """The limits of a ledger; ``Settings`` gives the values (one place for defaults)."""

    max_running: int
    lease: timedelta
    keep_finished: int = 50
    # Tasks a user may have waiting or running at once; more are refused (429).
    max_waiting: int = 20


def _ordered(ledger: TaskLedger) -> list[TaskRecord]:
    return sorted(ledger.tasks.values(), key=lambda r: r.seq)


def _with(ledger: TaskLedger, *records: TaskRecord) -> TaskLedger:
    return ledger.model_copy(update={"tasks": {**ledger.tasks, **{r.task_id: r for r in records}}})


def _next_attempt(record: TaskRecord, now: datetime, policy: LedgerPolicy) -> TaskRecord:
    return record.model_copy(
        update={
            "status": "running",
            "attempt": record.attempt + 1,
            "started": False,
            "lease_expires_at": now + policy.lease,
            "retry_at": None,
            "updated_at": now,
        }
    )


def grant(
    ledger: TaskLedger, now: datetime, policy: LedgerPolicy
) -> tuple[TaskLedger, list[TaskRecord]]:
    """Re-grant lapsed attempts, then start queued tasks in order while slots are free.

    Returns the ledger and the attempts to dispatch now.
    """
    dispatch: list[TaskRecord] = []
    for record in _ordered(ledger):
        lease = record.lease_expires_at
        if record.status == "running" and lease is not None and lease <= now:
            dispatch.append(_next_attempt(record, now, policy))
    ledger = _with(ledger, *dispatch)
    running = sum(1 for r in ledger.tasks.values() if r.status == "running")
    for record in _ordered(ledger):
        if running >= policy.max_running:
            break
        if record.status == "queued":
            dispatch.append(_next_attempt(record, now, policy))
            running += 1
    return _with(ledger, *dispatch), dispatch


def submit(
    ledger: TaskLedger,
    record: TaskRecord,
    now: datetime,
    policy: LedgerPolicy,
    again: bool = False,
    *,
    answered: bool = False,
) -> tuple[TaskLedger, list[TaskRecord]]:
    """Add a queued task (once: submitting the same task id again changes nothing new).

    With ``again``, a task that ended cancelled (it found its call not yet approved)
    is queued anew: the owner's approval is what lets it run; so is a task waiting for
    its user's answer (the answer is what lets it go on). An answer (``answered``)
    queues only a task still waiting, judged here on the stored ledger: its user may
    have cancelled it since the answer read the question open (another request).
    """
    existing = ledger.tasks.get(record.task_id)
    live = sum(1 for r in ledger.tasks.values() if r.status in ("queued", "running"))
    if existing is None and live >= policy.max_waiting:
        raise RateLimited(
            f"You already have {live} background tasks waiting or running, the most "
            f"allowed at once ({policy.max_waiting}); wait for some to finish, then ask "
            "again.",
            _soonest_lease_end(ledger, now, policy),
            limit="tasks_at_once",
        )
    anew = ("waiting_on_user",) if answered else ("cancelled", "waiting_on_user")
    if again and existing is not None and existing.status in anew:
        # Its attempts go on counting: each attempt's Cloud Task name is used once.
        requeued = existing.model_copy(
            update={"status": "queued", "seq": ledger.next_seq, "error": None, "updated_at": now}
        )
        ledger = _with(ledger, requeued).model_copy(update={"next_seq": ledger.next_seq + 1})
    if record.task_id not in ledger.tasks:
        queued = record.model_copy(
            update={"seq": ledger.next_seq, "status": "queued", "attempt": 0, "updated_at": now}
        )
        ledger = _with(ledger, queued).model_copy(update={"next_seq": ledger.next_seq + 1})
    return grant(ledger, now, policy)


def _soonest_lease_end(ledger: TaskLedger, now: datetime, policy: LedgerPolicy) -> int:
    """Seconds until the first running task's lease ends (it finishes or lapses by then,
    freeing a place), or a whole lease when none runs."""
    ends = [
        r.lease_expires_at
        for r in ledger.tasks.values()
        if r.status == "running" and r.lease_expires_at is not None
    ]
    soonest = min(ends, default=now + policy.lease)
    return int((soonest - now).total_seconds()) + 1


def claim(
    ledger: TaskLedger, task_id: str, attempt: int, now: datetime, policy: LedgerPolicy
) -> tuple[TaskLedger, Claim]:
    """Let one delivery of ``attempt`` run it; redeliveries are ``busy`` or ``stale``."""
    record = ledger.tasks.get(task_id)
    if record is None or record.status != "running" or record.attempt != attempt:
        return ledger, "stale"
    lease = record.lease_expires_at
    if record.started and lease is not None and lease > now:
        return ledger, "busy"
    if record.retry_at is not None and record.retry_at > now:
        return ledger, "busy"  # delivered before its backoff ended: the queue retries later
    claimed = record.model_copy(
        update={"started": True, "lease_expires_at": now + policy.lease, "updated_at": now}
    )
    return _with(ledger, claimed), "run"


def holds(ledger: TaskLedger, task_id: str, attempt: int) -> bool:
    record = ledger.tasks.get(task_id)
    return record is not None and record.status == "running" and record.attempt == attempt


def renew(ledger: TaskLedger, task_id: str, attempt: int, until: datetime) -> TaskLedger:
    """Extend the lease of a running attempt (a superseded attempt changes nothing)."""
    if not holds(ledger, task_id, attempt):
        return ledger
    return _with(ledger, ledger.tasks[task_id].model_copy(update={"lease_expires_at": until}))


def reschedule(
    ledger: TaskLedger,
    task_id: str,
    attempt: int,
    now: datetime,
    delay: timedelta,
    policy: LedgerPolicy,
    error: str | None = None,
) -> tuple[TaskLedger, TaskRecord | None]:
    """Grant the next attempt to start after ``delay``, keeping the slot meanwhile."""
    if not holds(ledger, task_id, attempt):
        return ledger, None
    record = _next_attempt(ledger.tasks[task_id], now, policy).model_copy(
        update={"retry_at": now + delay, "lease_expires_at": now + delay + policy.lease}
    )
    if error is not None:
        record = record.model_copy(update={"error": error})
    return _with(ledger, record), record


def finish(
    ledger: TaskLedger,
    task_id: str,
    attempt: int,
    status: TaskStatus,
    now: datetime,
    policy: LedgerPolicy,
    error: str | None = None,
) -> tuple[TaskLedger, list[TaskRecord]]:
    """End the task, free its slot, prune old records and start the next queued ones."""
    if holds(ledger, task_id, attempt):
        done = ledger.tasks[task_id].model_copy(
            update={
                "status": status,
                "started": False,
                "lease_expires_at": None,
                "retry_at": None,
                "error": error,
                "updated_at": now,
            }
        )
        ledger = _with(ledger, done)
    return grant(_prune(ledger, policy.keep_finished), now, policy)


def abandon(ledger: TaskLedger, task_ids: Sequence[str], now: datetime, error: str) -> TaskLedger:
    """Mark tasks that could not be handed to the queue as failed, whatever their attempt."""
    failed = [
        record.model_copy(
            update={
                "status": "failed",
                "started": False,
                "lease_expires_at": None,
                "error": error,
                "updated_at": now,
            }
        )
        for task_id in task_ids
        if (record := ledger.tasks.get(task_id)) is not None and record.status not in FINISHED
    ]
    return _with(ledger, *failed)


def cancellable(record: TaskRecord) -> bool:
    """The task can end at once: queued, granted but not yet claimed, or waiting for its
    user's answer (no handler holds it)."""
    return record.status in ("queued", "waiting_on_user") or (
        record.status == "running" and not record.started
    )


def request_cancel(ledger: TaskLedger, task_id: str, now: datetime) -> TaskLedger:
    """Ask a running task to stop: its handler sees the request at the tool's next step
    (a progress step or a model call, each read from the ledger) and ends it cancelled.
    The slot stays held until then: the tool is still running."""
    record = ledger.tasks.get(task_id)
    if record is None or record.status != "running" or record.cancel_requested:
        return ledger
    return _with(ledger, record.model_copy(update={"cancel_requested": True, "updated_at": now}))


def wait(
    ledger: TaskLedger, task_id: str, attempt: int, now: datetime, policy: LedgerPolicy
) -> tuple[TaskLedger, list[TaskRecord]]:
    """The task waits for its user's answer: it gives up its slot and lease (an answer
    may take hours) and starts the next queued ones; the answer queues it again
    (``submit`` with ``again``)."""
    if holds(ledger, task_id, attempt):
        waiting = ledger.tasks[task_id].model_copy(
            update={
                "status": "waiting_on_user",
                "started": False,
                "lease_expires_at": None,
                "retry_at": None,
                "updated_at": now,
            }
        )
        ledger = _with(ledger, waiting)
    return grant(ledger, now, policy)


def cancel(
    ledger: TaskLedger, task_ids: Sequence[str], now: datetime, policy: LedgerPolicy
) -> tuple[TaskLedger, list[TaskRecord]]:
    """Cancel tasks that have not started (queued, or granted but not yet claimed), free
    their slots, and start the next queued ones. A task already running is left to end."""
    cancelled = [
        record.model_copy(
            update={
                "status": "cancelled",
                "started": False,
                "lease_expires_at": None,
                "retry_at": None,
                "updated_at": now,
            }
        )
        for task_id in task_ids
        if (record := ledger.tasks.get(task_id)) is not None and cancellable(record)
    ]
    return grant(_with(ledger, *cancelled), now, policy)


def forget(ledger: TaskLedger, conversation_id: str) -> TaskLedger:
    """Drop the ended records of a deleted conversation's tasks (its sections went with
    it): nothing of it stays in the ledger. One still running stays until it ends."""
    tasks = {
        task_id: record
        for task_id, record in ledger.tasks.items()
        if record.conversation_id != conversation_id or record.status not in FINISHED
    }
    if len(tasks) == len(ledger.tasks):
        return ledger
    return ledger.model_copy(update={"tasks": tasks})


def _prune(ledger: TaskLedger, keep: int) -> TaskLedger:
    finished = sorted(
        (r for r in ledger.tasks.values() if r.status in FINISHED),
        key=lambda r: r.updated_at,
    )
    if len(finished) <= keep:
        return ledger
    drop = {r.task_id for r in finished[: len(finished) - keep]}
    tasks = {k: v for k, v in ledger.tasks.items() if k not in drop}
    return ledger.model_copy(update={"tasks": tasks})
