"""Pure changes to a user's ledger for model calls: runs at once (slots, and the runs
waiting for one, taken and freed by the store's ``RunSlots``), the daily token budget
with its reservations (``service.Budget``), and uploads a day."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.errors import (
    RateLimited,
    SlotsTaken,
)
from shared.schemas.server import (
    DailyUsage,
    Reservation,
    RunSlot,
    TaskLedger,
    WaitingRun,
)

# -- runs at once and the daily token budget ---------------------------------------------
#
# Every model call passes ``admit_run`` first (``RunSlots.admit_run``): a run takes a slot, or
# joins its conversation's, while today's tokens last. A new message refused is a 429;
# a queued run refused a slot waits in ``waiting`` and ``release_run`` names it when a
# slot frees; one refused for the day's tokens ends as a ``rate_limited`` error.


# A slot frees the moment one of the user's replies ends, which the ledger cannot
# foresee: it records when a slot lapses (10 minutes on), not how far its run has got.
# Replies take seconds, not minutes, so a refused client is asked to try again in this
# many seconds (never later than the soonest lapse), not at the lapse, which told
# parallel sends to wait the whole lease.
SLOT_RETRY_SECONDS = 5


@dataclass(frozen=True, slots=True)
class UserLimits:
    runs_at_once: int
    daily_tokens: int
    daily_uploads: int = 100
    slot: timedelta = timedelta(minutes=10)


def usage_today(ledger: TaskLedger, now: datetime) -> DailyUsage:
    """The user's usage so far today (UTC); a new day starts from nothing."""
    today = now.date().isoformat()
    usage = ledger.usage
    return usage if usage is not None and usage.day == today else DailyUsage(day=today)


def until_midnight(now: datetime) -> int:
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return int((tomorrow - now).total_seconds()) + 1


SPENT = "You have used today's allowance of Spark AI Agent; it renews at midnight (UTC)."


def check_tokens(
    ledger: TaskLedger, now: datetime, limits: UserLimits, *, reserved: bool = True
) -> None:
    """Refuse any model call once the user's tokens for today are spent (with
    ``reserved``, what is reserved for calls under way counts as spent).

    Raises:
        RateLimited: they are spent.
    """
    held = sum(r.tokens for r in ledger.reservations.values()) if reserved else 0
    if usage_today(ledger, now).tokens + held >= limits.daily_tokens:
        raise RateLimited(SPENT, until_midnight(now), limit="daily_tokens")


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


def _dead_runs_dropped(ledger: TaskLedger, now: datetime) -> TaskLedger:
    """``ledger`` without the slots that lapsed unreleased (their process died). Their
    runs' tokens are counted already: each step's as it ended, and the step in flight
    by its reservation, charged whole when its lease ends (DESIGN §13)."""
    lapsed = {k for k, v in ledger.runs.items() if v.until <= now}
    if not lapsed:
        return ledger
    runs = {k: v for k, v in ledger.runs.items() if k not in lapsed}
    return ledger.model_copy(update={"runs": runs})


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
    ledger = _dead_runs_dropped(ledger, now)
    # What is spent, not what is reserved: a send's own first request (its head start)
    # may hold the reservation already. Each model call reserves as it is made.
    check_tokens(ledger, now, limits, reserved=False)
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
    today = usage_today(ledger, now)
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
    ledger = _dead_runs_dropped(ledger, now)
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
    today = usage_today(ledger, now)
    if today.uploads >= limits.daily_uploads:
        raise RateLimited(
            f"You have uploaded today's allowance of {limits.daily_uploads} files; it "
            "renews at midnight (UTC).",
            until_midnight(now),
            limit="daily_uploads",
        )
    counted = today.model_copy(update={"uploads": today.uploads + 1})
    return ledger.model_copy(update={"usage": counted})


def withdraw_uploads(ledger: TaskLedger, now: datetime, count: int) -> TaskLedger:
    """Give back ``count`` of today's uploads, counted for files a refused send wrote
    and then removed (the day's count never goes below none)."""
    today = usage_today(ledger, now)
    if not count or not today.uploads:
        return ledger
    given = today.model_copy(update={"uploads": max(today.uploads - count, 0)})
    return ledger.model_copy(update={"usage": given})
