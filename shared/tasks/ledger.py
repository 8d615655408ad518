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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from shared.errors import (
    RateLimited,
    SlotsTaken,
    VoiceSessionEnded,
    VoiceSessionNotFound,
    VoiceSessionUsed,
)
from shared.schemas.documents import TaskStatus
from shared.schemas.server import (
    DailyUsage,
    Reservation,
    RunSlot,
    TaskLedger,
    TaskRecord,
    VoiceGrant,
    WaitingRun,
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


def cancel_wanted(ledger: TaskLedger, task_id: str) -> bool:
    """Its user asked the task to stop (``request_cancel``)."""
    record = ledger.tasks.get(task_id)
    return record is not None and record.status == "running" and bool(record.cancel_requested)


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


# -- runs at once and the daily token budget ---------------------------------------------
#
# Every model call passes ``admit_run`` first (``RunService.admit``): a run takes a slot, or
# joins its conversation's, while today's tokens last. A new message refused is a 429;
# a queued run refused a slot waits in ``waiting`` and ``release_run`` names it when a
# slot frees; one refused for the day's tokens ends as a ``rate_limited`` error.


# A slot frees the moment one of the user's replies ends, which the ledger cannot
# foresee: it records when a slot lapses (10 minutes on), not how far its run has got.
# Replies take seconds (the offline model about 1 s, a model's usually under 30 s), so
# a refused client is asked to try again in this many seconds (never later than the
# soonest lapse), not at the lapse, which told five parallel sends to wait ten minutes.
SLOT_RETRY_SECONDS = 5


@dataclass(frozen=True, slots=True)
class UserLimits:
    runs_at_once: int
    daily_tokens: int
    daily_uploads: int = 100
    slot: timedelta = timedelta(minutes=10)


def _today(ledger: TaskLedger, now: datetime) -> DailyUsage:
    """The user's usage so far today (UTC); a new day starts from nothing."""
    today = now.date().isoformat()
    usage = ledger.usage
    return usage if usage is not None and usage.day == today else DailyUsage(day=today)


def _until_midnight(now: datetime) -> int:
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return int((tomorrow - now).total_seconds()) + 1


SPENT = "You have used today's allowance of Spark AI Agent; it renews at midnight (UTC)."


def check_tokens(ledger: TaskLedger, now: datetime, limits: UserLimits) -> None:
    """Refuse any model call once the user's tokens for today are spent (what is
    reserved for calls under way counts as spent).

    Raises:
        RateLimited: they are spent.
    """
    reserved = sum(r.tokens for r in ledger.reservations.values())
    if _today(ledger, now).tokens + reserved >= limits.daily_tokens:
        raise RateLimited(SPENT, _until_midnight(now))


def _lapsed_charged(ledger: TaskLedger, now: datetime) -> TaskLedger:
    """``ledger`` with each reservation whose lease has passed unsettled charged whole."""
    lapsed = {k: r for k, r in ledger.reservations.items() if r.until <= now}
    if not lapsed:
        return ledger
    kept = {k: r for k, r in ledger.reservations.items() if k not in lapsed}
    charged = spend(ledger, now, sum(r.tokens for r in lapsed.values()))
    return charged.model_copy(update={"reservations": kept})


def reserve(
    ledger: TaskLedger,
    reservation_id: str,
    reservation: Reservation,
    now: datetime,
    limits: UserLimits,
) -> TaskLedger:
    """Set ``reservation`` aside for a provider call about to be made.

    Raises:
        RateLimited: today's tokens are spent (nothing is reserved).
    """
    ledger = _lapsed_charged(ledger, now)
    check_tokens(ledger, now, limits)
    return ledger.model_copy(
        update={"reservations": {**ledger.reservations, reservation_id: reservation}}
    )


def settle(ledger: TaskLedger, reservation_id: str, tokens: int, now: datetime) -> TaskLedger:
    """Replace a reservation by the ``tokens`` its call used. One that lapsed was charged
    whole already, and stays so (idempotent)."""
    ledger = _lapsed_charged(ledger, now)
    if reservation_id not in ledger.reservations:
        return ledger
    kept = {k: r for k, r in ledger.reservations.items() if k != reservation_id}
    return spend(ledger.model_copy(update={"reservations": kept}), now, tokens)


def _live(ledger: TaskLedger, now: datetime) -> dict[str, RunSlot]:
    return {k: v for k, v in ledger.runs.items() if v.until > now}


def _waiting(ledger: TaskLedger, now: datetime, limits: UserLimits) -> dict[str, WaitingRun]:
    # A waiter not woken within a slot's time is dropped; its run's watchdog still tries
    # it again (and records it anew if it must wait on).
    return {k: w for k, w in ledger.waiting.items() if w.since + limits.slot > now}


RUN_RESERVE = 4_096
"""Tokens charged for each run whose slot lapsed without being released (its process
died before it could count what it used): about one long reply."""


def _lapsed_runs_charged(ledger: TaskLedger, now: datetime) -> TaskLedger:
    """``ledger`` without the slots that lapsed unreleased, each of their runs charged
    ``RUN_RESERVE`` (DESIGN §13: a run's slot is its reservation)."""
    lapsed = {k: v for k, v in ledger.runs.items() if v.until <= now}
    if not lapsed:
        return ledger
    runs = {k: v for k, v in ledger.runs.items() if k not in lapsed}
    charged = spend(ledger, now, RUN_RESERVE * sum(len(v.members) for v in lapsed.values()))
    return charged.model_copy(update={"runs": runs})


def _with_runs(
    ledger: TaskLedger, runs: dict[str, RunSlot], waiting: dict[str, WaitingRun]
) -> TaskLedger:
    if runs == ledger.runs and waiting == ledger.waiting:
        return ledger  # nothing to write
    return ledger.model_copy(update={"runs": runs, "waiting": waiting})


def admit_run(
    ledger: TaskLedger,
    run_id: str,
    conversation_id: str,
    now: datetime,
    limits: UserLimits,
    wait: bool = False,
) -> tuple[TaskLedger, SlotsTaken | None]:
    """Take a slot for a run, within the user's limits, before it calls the model.

    A conversation holds one slot, whatever its runs: a run of a conversation that holds
    one joins it (one run at a time there: the send then gets 409, or queues). With
    ``wait``, a run refused only because every slot is taken is recorded as waiting
    (``release_run`` names it when one frees) and the refusal is returned, not raised.

    Raises:
        RateLimited: today's tokens are spent; or, without ``wait``, every slot is taken
            (``SlotsTaken``). Nothing is written then.
    """
    ledger = _lapsed_runs_charged(ledger, now)
    check_tokens(ledger, now, limits)
    live, waiting = _live(ledger, now), _waiting(ledger, now, limits)
    held = live.get(conversation_id)
    if held is None and len(live) >= limits.runs_at_once:
        lapses = min(v.until for v in live.values())
        refused = SlotsTaken(
            f"You already have {len(live)} replies being written, and Spark AI Agent "
            f"writes at most {limits.runs_at_once} at once for you; wait for one to "
            "finish, then send this again.",
            min(SLOT_RETRY_SECONDS, int((lapses - now).total_seconds())),
        )
        if not wait:
            raise refused
        before = waiting.get(conversation_id)
        if before is None or before.run_id != run_id:
            waiting[conversation_id] = WaitingRun(run_id=run_id, since=now)
        else:  # it keeps its place (first come, first woken)
            waiting[conversation_id] = before.model_copy(update={"tries": before.tries + 1})
        return _with_runs(ledger, live, waiting), refused
    if held is None:
        live[conversation_id] = RunSlot(run_id=run_id, until=now + limits.slot)
    elif run_id not in held.members:
        until = max(held.until, now + limits.slot)
        live[conversation_id] = held.model_copy(
            update={"joined": [*held.joined, run_id], "until": until}
        )
    waiting.pop(conversation_id, None)
    return _with_runs(ledger, live, waiting), None


def spend(ledger: TaskLedger, now: datetime, tokens: int) -> TaskLedger:
    """Count ``tokens`` against the user's day."""
    if not tokens:
        return ledger
    today = _today(ledger, now)
    return ledger.model_copy(
        update={"usage": today.model_copy(update={"tokens": today.tokens + tokens})}
    )


def release_run(
    ledger: TaskLedger, run_id: str, now: datetime, tokens: int, limits: UserLimits
) -> tuple[TaskLedger, list[tuple[str, str]]]:
    """Free the run's place in its slot (if it holds one) and count the tokens it used
    today. Returns the waiting runs to wake, oldest first, as many as slots are free:
    ``(conversation id, run id)``; each stays recorded until it is admitted or released.
    """
    ledger = _lapsed_runs_charged(ledger, now)
    runs: dict[str, RunSlot] = {}
    for conversation_id, slot in _live(ledger, now).items():
        left = [r for r in slot.members if r != run_id]
        if len(left) == len(slot.members):
            runs[conversation_id] = slot
        elif left:
            runs[conversation_id] = slot.model_copy(update={"run_id": left[0], "joined": left[1:]})
    waiting = {k: w for k, w in _waiting(ledger, now, limits).items() if w.run_id != run_id}
    released = spend(_with_runs(ledger, runs, waiting), now, tokens)
    free = limits.runs_at_once - len(runs)
    oldest = sorted(waiting.items(), key=lambda item: item[1].since)[: max(free, 0)]
    return released, [(conversation_id, w.run_id) for conversation_id, w in oldest]


def admit_upload(ledger: TaskLedger, now: datetime, limits: UserLimits) -> TaskLedger:
    """Count one more upload session today, within the user's daily allowance.

    Raises:
        RateLimited: today's uploads are used up.
    """
    today = _today(ledger, now)
    if today.uploads >= limits.daily_uploads:
        raise RateLimited(
            f"You have uploaded today's allowance of {limits.daily_uploads} files; it "
            "renews at midnight (UTC).",
            _until_midnight(now),
        )
    counted = today.model_copy(update={"uploads": today.uploads + 1})
    return ledger.model_copy(update={"usage": counted})


# -- live-audio sessions -----------------------------------------------------------------
#
# grant_voice (counted, nothing minted yet) ─▶ record_voice (the secret's hash) ─▶
# redeem_voice (the first voice message binds it to its conversation) ─▶ ends_at.
# withdraw_voice undoes a grant whose secret the provider did not give.

VOICE_KEPT = timedelta(days=1)
"""How long a session's grant (the secret's hash, whose it was) is kept after it ends."""


@dataclass(frozen=True, slots=True)
class VoiceLimits:
    sessions_per_day: int = 20
    session: timedelta = timedelta(minutes=30)


def grant_voice(
    ledger: TaskLedger,
    session_id: str,
    provider: str,
    model: str,
    now: datetime,
    limits: VoiceLimits,
) -> TaskLedger:
    """Count one more live-audio session today and record its grant (no secret yet).

    Raises:
        RateLimited: today's sessions are used up; nothing is written.
    """
    today = _today(ledger, now)
    if today.voice_sessions >= limits.sessions_per_day:
        raise RateLimited(
            f"You have started today's allowance of {limits.sessions_per_day} voice "
            "conversations; it renews at midnight (UTC). You can still type, or use "
            "push-to-talk.",
            _until_midnight(now),
        )
    kept = {k: g for k, g in ledger.voice.items() if g.ends_at + VOICE_KEPT > now}
    kept[session_id] = VoiceGrant(
        provider=provider, model=model, granted_at=now, ends_at=now + limits.session
    )
    counted = today.model_copy(update={"voice_sessions": today.voice_sessions + 1})
    return ledger.model_copy(update={"usage": counted, "voice": kept})


def record_voice(
    ledger: TaskLedger, session_id: str, secret_hash: str, expires_at: datetime
) -> TaskLedger:
    """Keep the hash of the secret the provider minted for the session."""
    grant = ledger.voice.get(session_id)
    if grant is None or grant.secret_hash == secret_hash:
        return ledger
    updated = grant.model_copy(update={"secret_hash": secret_hash, "expires_at": expires_at})
    return ledger.model_copy(update={"voice": {**ledger.voice, session_id: updated}})


def withdraw_voice(ledger: TaskLedger, session_id: str, now: datetime) -> TaskLedger:
    """Forget a grant whose secret was never minted, and give its count back."""
    grant = ledger.voice.get(session_id)
    if grant is None or grant.secret_hash is not None:
        return ledger
    voice = {k: g for k, g in ledger.voice.items() if k != session_id}
    today = _today(ledger, now)
    if grant.granted_at.date().isoformat() == today.day and today.voice_sessions:
        today = today.model_copy(update={"voice_sessions": today.voice_sessions - 1})
    return ledger.model_copy(update={"voice": voice, "usage": today})


def redeem_voice(
    ledger: TaskLedger, session_id: str, conversation_id: str, now: datetime
) -> TaskLedger:
    """Let a voice message into ``conversation_id`` name the session: the first one
    binds the session to its conversation, later ones must come in the same one.

    Raises:
        VoiceSessionNotFound: no session with this id was minted for the user.
        VoiceSessionEnded: it is over.
        VoiceSessionUsed: it was redeemed in another conversation.
    """
    grant = ledger.voice.get(session_id)
    if grant is None or grant.secret_hash is None:
        raise VoiceSessionNotFound("No voice session with this voiceSessionId is yours.")
    if grant.ends_at <= now:
        raise VoiceSessionEnded(
            "This voice session has ended; start a new one to carry on talking."
        )
    if grant.conversation_id is not None:
        if grant.conversation_id != conversation_id:
            raise VoiceSessionUsed(
                "This voice session belongs to another conversation; start a new one "
                "for this conversation."
            )
        return ledger
    bound = grant.model_copy(update={"conversation_id": conversation_id, "redeemed_at": now})
    return ledger.model_copy(update={"voice": {**ledger.voice, session_id: bound}})
