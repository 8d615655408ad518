"""Handing work to Cloud Tasks: task tool calls within each user's concurrency limit,
the replies of queued runs, and the watchdogs that close runs whose producer died."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from shared.clock import Clock
from shared.errors import (
    IllegalTransition,
    NotFound,
    RateLimited,
    StoreError,
    TaskCancelled,
    TaskFinished,
)
from shared.llm.base import Meter
from shared.queue.base import QueuedTask, TaskQueue
from shared.queue.naming import (
    attempt_name,
    expire_name,
    follow_up_name,
    reply_name,
    task_id_for,
    watchdog_name,
)
from shared.queue.port import Call, Claimed, Ended
from shared.schemas.documents import ActiveRun, Conversation, KeyOutput, TaskDocument
from shared.schemas.server import Reservation, TaskLedger, TaskRecord
from shared.schemas.tasks import ExpireTask, FollowUpTask, ReplyTask, ToolTask, WatchdogTask
from shared.store.base import OpeningStore, SectionChange, TaskDocumentStore, TaskLedgerStore
from shared.store.memory import InMemoryTaskDocumentStore
from shared.tasks import ledger as ledgers
from shared.tasks.sections import Ending, follow

log = logging.getLogger(__name__)

R = TypeVar("R")
NO_TASK = "No task with this id."

RESERVATION_LEASE = timedelta(minutes=10)
"""How long a provider call's reservation lasts unsettled before it is charged whole:
longer than any kind of call may take (``shared/egress/gate.BOUNDS``)."""


@dataclass
class TaskScheduler:
    """Admits tasks against the per-user limit and enqueues the attempts granted: the
    ``TaskPort`` (``shared/queue/port.py``) of the agent and of the task handler. Every
    change to the ledger is one of ``ledger.py``'s pure functions, applied here."""

    ledger: TaskLedgerStore
    queue: TaskQueue
    clock: Clock
    policy: ledgers.LedgerPolicy
    watchdog_grace: timedelta
    limits: ledgers.UserLimits
    # Each task's section (``/{uid}/client/tasks/{taskId}``): its start and progress steps
    # are written here (``show``); its status moves with the ledger, written by the
    # ledger store (``apply_with_sections``; in memory, into its own ``sections``).
    sections: TaskDocumentStore = field(default_factory=InMemoryTaskDocumentStore)
    voice: ledgers.VoiceLimits = field(default_factory=ledgers.VoiceLimits)
    # The ledger with one conversation, in one commit (``admit_and_open``); none given:
    # the in-memory one over this ledger, if it is in memory, with no conversation.
    openings: OpeningStore | None = None

    async def _apply(
        self,
        user_id: str,
        change: Callable[[TaskLedger], tuple[TaskLedger, R]],
        ending: Ending | None = None,
        question: str | None = None,
    ) -> R:
        """Apply a ledger change and return what it decided (from the attempt that landed).
        The sections of the tasks whose status it changes follow their records in the
        same write (``TaskLedgerStore.apply_with_sections``): a finished task's section
        ends, with ``ending``, or waits showing ``question``, exactly when its record
        does, never a write later."""
        now = self.clock.now()

        def tracked(
            ledger: TaskLedger,
        ) -> tuple[TaskLedger, R, dict[str, SectionChange]]:
            updated, decided = change(ledger)
            moved = {
                task_id: _following(record, now, ending, question)
                for task_id, record in updated.tasks.items()
                if (before := ledger.tasks.get(task_id)) is None or before.status != record.status
            }
            return updated, decided, moved

        _, decided = await self.ledger.apply_with_sections(user_id, tracked)
        return decided

    async def show(self, user_id: str, task_id: str, change: SectionChange) -> None:
        """``TaskPort.show``: a change to the task's section."""
        await self.sections.apply(user_id, task_id, change)

    async def submit(
        self,
        user_id: str,
        conversation_id: str,
        calls: Sequence[Call],
        again: bool = False,
        *,
        answered: bool = False,
    ) -> list[TaskRecord]:
        """Record the calls' tasks (once each) and return the attempts that may start now.

        Raises:
            StoreError: nothing may have been recorded.
        """
        now = self.clock.now()
        records = [
            TaskRecord(
                task_id=task_id_for(conversation_id, call_id),
                conversation_id=conversation_id,
                tool_call_id=call_id,
                tool=tool,
                display_text=display,
                seq=0,
                status="queued",
                created_at=now,
                updated_at=now,
            )
            for call_id, tool, display in calls
        ]

        def change(ledger: TaskLedger) -> tuple[TaskLedger, list[TaskRecord]]:
            granted: dict[str, TaskRecord] = {}
            for record in records:
                ledger, dispatch = ledgers.submit(
                    ledger, record, now, self.policy, again, answered=answered
                )
                granted.update((r.task_id, r) for r in dispatch)
            return ledger, [ledger.tasks[k] for k in granted]

        return await self._apply(user_id, change)

    async def dispatch(self, user_id: str, records: Sequence[TaskRecord]) -> None:
        """Enqueue the granted attempts.

        An attempt that cannot be enqueued keeps its slot until its lease lapses; a
        watchdog or the next change to the ledger then grants it again.

        Raises:
            QueueUnavailable: from the first attempt the queue refused.
        """
        for record in records:
            payload = ToolTask(
                user_id=user_id,
                conversation_id=record.conversation_id,
                task_id=record.task_id,
                attempt=record.attempt,
            )
            await self.queue.enqueue(
                QueuedTask(
                    attempt_name(record.task_id, record.attempt),
                    payload.to_bytes(),
                    record.retry_at,
                )
            )

    async def enqueue_reply(
        self, user_id: str, conversation_id: str, run_id: str, after: str | None = None
    ) -> None:
        """Have a task produce a queued run (a ``202`` send, a queued message, a follow-up;
        ``after``: one that waited for the slot the run ``after`` freed)."""
        payload = ReplyTask(user_id=user_id, conversation_id=conversation_id, run_id=run_id)
        await self.queue.enqueue(QueuedTask(reply_name(run_id, after), payload.to_bytes()))

    async def enqueue_watchdog(self, user_id: str, conversation_id: str, run: ActiveRun) -> None:
        """Have a task check on ``run`` when its lease lapses, plus the grace period."""
        due = run.lease_expires_at + self.watchdog_grace
        payload = WatchdogTask(user_id=user_id, conversation_id=conversation_id, run_id=run.run_id)
        name = watchdog_name(run.run_id, due.timestamp())
        await self.queue.enqueue(QueuedTask(name, payload.to_bytes(), due))

    async def hand_on(self, user_id: str, conversation_id: str, run: ActiveRun) -> None:
        """Have a task produce the queued ``run``; its watchdog produces it otherwise."""
        try:
            await self.enqueue_watchdog(user_id, conversation_id, run)
            await self.enqueue_reply(user_id, conversation_id, run.run_id)
        except Exception:
            log.warning("run %s: not handed on yet", run.run_id, exc_info=True)

    async def expire_client_calls(
        self, user_id: str, conversation_id: str, call_ids: Sequence[str], delay_seconds: float
    ) -> None:
        """Have a task give each client call an error result if it is still unanswered
        after ``delay_seconds``."""
        due = self.clock.now() + timedelta(seconds=delay_seconds)
        for call_id in call_ids:
            payload = ExpireTask(
                user_id=user_id,
                conversation_id=conversation_id,
                tool_call_id=call_id,
                after_seconds=round(delay_seconds),
            )
            name = expire_name(task_id_for(conversation_id, call_id))
            await self.queue.enqueue(QueuedTask(name, payload.to_bytes(), due))

    async def enqueue_follow_up(
        self, user_id: str, conversation_id: str, message_id: str, attempt: int = 0
    ) -> None:
        """Have a task continue the agent after ``message_id`` when the conversation is free."""
        payload = FollowUpTask(
            user_id=user_id,
            conversation_id=conversation_id,
            message_id=message_id,
            attempt=attempt,
        )
        due = self.clock.now() + timedelta(seconds=min(60, 2**attempt)) if attempt else None
        await self.queue.enqueue(
            QueuedTask(follow_up_name(message_id, attempt), payload.to_bytes(), due)
        )

    def _admission(
        self,
        ledger: TaskLedger,
        run_id: str,
        conversation_id: str,
        now: datetime,
        voice_session: str | None,
        wait: bool = False,
    ) -> tuple[TaskLedger, RateLimited | None]:
        """The one admission's pure change: ``redeem_voice`` first for a voice message,
        then the ledger's ``admit_run`` (slots and tokens; it raises a refusal, or with
        ``wait`` returns it)."""
        if voice_session is not None:
            ledger = ledgers.redeem_voice(ledger, voice_session, conversation_id, now)
        return ledgers.admit_run(ledger, run_id, conversation_id, now, self.limits, wait)

    async def admit_run(
        self,
        user_id: str,
        run_id: str,
        conversation_id: str,
        wait: bool = False,
        voice_session: str | None = None,
    ) -> None:
        """``TaskPort.admit_run``: the ledger's ``admit_run`` decides (slots and tokens),
        and ``redeem_voice`` first, in the same write, for a voice message."""
        now = self.clock.now()

        def change(led: TaskLedger) -> tuple[TaskLedger, RateLimited | None]:
            return self._admission(led, run_id, conversation_id, now, voice_session, wait)

        refused = await self._apply(user_id, change)
        if refused is not None:
            raise refused

    async def admit_and_open(
        self,
        user_id: str,
        run_id: str,
        conversation_id: str,
        opening: Callable[[Conversation | None], Conversation],
        *,
        new: bool,
        voice_session: str | None = None,
        reserve: int = 0,
    ) -> Conversation:
        """``TaskPort.admit_and_open``: ``admit_run``'s change (``redeem_voice`` first)
        and ``opening`` in one commit (``OpeningStore``); a run left waiting, queued,
        takes no slot (its claim admits it when its turn comes)."""
        now = self.clock.now()

        def change(
            ledger: TaskLedger, conversation: Conversation | None
        ) -> tuple[TaskLedger, Conversation, None]:
            admitted, _ = self._admission(ledger, run_id, conversation_id, now, voice_session)
            opened = opening(conversation)
            active = opened.active_run
            if active is None or active.run_id != run_id:
                admitted = ledger  # it waits, queued
            return admitted, opened, None

        store = self.openings
        if store is None:
            raise StoreError("No opening store was given to this scheduler.")
        conversation, _ = await store.open(
            user_id, conversation_id, change, new=new, reserve=reserve
        )
        return conversation

    async def grant_voice(self, user_id: str, session_id: str, provider: str, model: str) -> None:
        """``VoiceAllowance.grant_voice``: the ledger's ``grant_voice`` decides."""
        now = self.clock.now()
        await self._apply(
            user_id,
            lambda led: (
                ledgers.grant_voice(led, session_id, provider, model, now, self.voice),
                None,
            ),
        )

    async def record_voice(
        self, user_id: str, session_id: str, secret_hash: str, expires_at: datetime
    ) -> None:
        """``VoiceAllowance.record_voice``."""
        await self._apply(
            user_id,
            lambda led: (ledgers.record_voice(led, session_id, secret_hash, expires_at), None),
        )

    async def withdraw_voice(self, user_id: str, session_id: str) -> None:
        """``VoiceAllowance.withdraw_voice``."""
        now = self.clock.now()
        await self._apply(user_id, lambda led: (ledgers.withdraw_voice(led, session_id, now), None))

    async def admit_upload(self, user_id: str) -> None:
        """``TaskPort.admit_upload``: the ledger's ``admit_upload`` decides."""
        now = self.clock.now()
        await self._apply(user_id, lambda led: (ledgers.admit_upload(led, now, self.limits), None))

    async def release_run(self, user_id: str, run_id: str, tokens: int) -> None:
        """Free the run's slot, count its tokens against today's budget, and hand the
        runs that waited for a slot to tasks (idempotent)."""
        now = self.clock.now()
        try:
            woken = await self._apply(
                user_id, lambda led: ledgers.release_run(led, run_id, now, tokens, self.limits)
            )
        except Exception:
            # The slot lapses by itself (``UserLimits.slot``); only the count is lost.
            log.warning("run %s: could not release its slot", run_id, exc_info=True)
            return
        for conversation_id, waiting in woken:
            try:
                await self.enqueue_reply(user_id, conversation_id, waiting, after=run_id)
            except Exception:
                # Its watchdog tries it again when its lease lapses.
                log.warning("run %s: not woken yet", waiting, exc_info=True)

    async def spend(self, user_id: str, tokens: int) -> None:
        """Count tokens spent outside a run (by task tools) against today's budget.

        Raises:
            StoreError: they were not counted.
        """
        now = self.clock.now()
        await self._apply(user_id, lambda led: (ledgers.spend(led, now, tokens), None))

    async def check_tokens(self, user_id: str) -> None:
        """Refuse a model call once today's tokens are spent (on a fresh read).

        Raises:
            RateLimited: they are spent.
        """
        ledgers.check_tokens(await self.ledger.get(user_id), self.clock.now(), self.limits)

    async def reserve(
        self, user_id: str, tokens: int, kind: str, task_id: str | None = None
    ) -> str:
        """Set ``tokens`` aside for one provider call (``ledger.reserve``), for as long as
        ``RESERVATION_LEASE``; its id. With ``task_id``, in the same write, refuse if its
        user cancelled that task.

        Raises:
            RateLimited: today's tokens are spent (nothing is reserved).
            TaskCancelled: the task's user asked it to stop.
        """
        now = self.clock.now()
        reservation_id = secrets.token_hex(8)
        held = Reservation(tokens=tokens, until=now + RESERVATION_LEASE, kind=kind)

        def change(ledger: TaskLedger) -> tuple[TaskLedger, None]:
            if task_id is not None and ledgers.cancel_wanted(ledger, task_id):
                raise TaskCancelled("Cancelled by the user.")
            return ledgers.reserve(ledger, reservation_id, held, now, self.limits), None

        await self._apply(user_id, change)
        return reservation_id

    async def settle(self, user_id: str, reservation_id: str, tokens: int) -> None:
        """Count what a reserved call used in place of its reservation (idempotent).

        Raises:
            StoreError: it was not counted (the reservation lapses, charged whole).
        """
        now = self.clock.now()
        await self._apply(
            user_id, lambda led: (ledgers.settle(led, reservation_id, tokens, now), None)
        )

    async def check_task(self, user_id: str, task_id: str) -> None:
        """Before a task tool's next step, on one fresh read of the ledger: stop if its
        user cancelled it, and refuse a model call once today's tokens are spent.

        Raises:
            TaskCancelled: its user asked it to stop (``TaskPort.cancel_task``).
            RateLimited: today's tokens are spent.
        """
        ledger = await self.ledger.get(user_id)
        if ledgers.cancel_wanted(ledger, task_id):
            raise TaskCancelled("Cancelled by the user.")
        ledgers.check_tokens(ledger, self.clock.now(), self.limits)

    async def check_cancel(self, user_id: str, task_id: str) -> None:
        """``TaskPort.check_cancel``: a progress step's look at the ledger."""
        if ledgers.cancel_wanted(await self.ledger.get(user_id), task_id):
            raise TaskCancelled("Cancelled by the user.")

    def meter(self, user_id: str, task_id: str | None = None) -> Meter:
        """What a task tool's model calls are checked and counted with (with ``task_id``,
        each check also stops the tool once its user cancelled it)."""
        return LedgerMeter(self, user_id, task_id)

    async def claim(self, user_id: str, task_id: str, attempt: int) -> Claimed:
        """Let this delivery of ``attempt`` run it: its record, or why not."""
        now = self.clock.now()

        def change(ledger: TaskLedger) -> tuple[TaskLedger, Claimed]:
            ledger, claim = ledgers.claim(ledger, task_id, attempt, now, self.policy)
            return ledger, ledger.tasks[task_id] if claim == "run" else claim

        return await self._apply(user_id, change)

    async def renew(self, user_id: str, task_id: str, attempt: int) -> None:
        """Extend the running attempt's lease by a full lease from now.

        Raises:
            StoreError: it was not extended.
        """
        until = self.clock.now() + self.policy.lease
        await self._apply(user_id, lambda led: (ledgers.renew(led, task_id, attempt, until), None))

    async def reschedule(
        self, user_id: str, task_id: str, attempt: int, delay: timedelta, error: str | None
    ) -> None:
        """Grant the next attempt, keeping the slot, and enqueue it to start after ``delay``.

        Raises:
            QueueUnavailable: granted but not enqueued (granted again when its lease lapses).
        """
        now = self.clock.now()
        record = await self._apply(
            user_id,
            lambda led: ledgers.reschedule(led, task_id, attempt, now, delay, self.policy, error),
        )
        if record is not None:
            await self.dispatch(user_id, [record])

    async def finish(
        self,
        user_id: str,
        task_id: str,
        attempt: int,
        status: Ended,
        error: str | None = None,
        summary: str | None = None,
        key_outputs: Sequence[KeyOutput] = (),
    ) -> None:
        """End the task, free its slot, and start the next queued tasks."""
        now = self.clock.now()
        ending = None if summary is None else Ending(summary, tuple(key_outputs))
        granted = await self._apply(
            user_id,
            lambda led: ledgers.finish(led, task_id, attempt, status, now, self.policy, error),
            ending,
        )
        await self._dispatch_quietly(user_id, granted)

    async def wait(self, user_id: str, task_id: str, attempt: int, question: str) -> None:
        """``TaskPort.wait``: the task waits for its user's answer, its slot freed."""
        now = self.clock.now()
        granted = await self._apply(
            user_id,
            lambda led: ledgers.wait(led, task_id, attempt, now, self.policy),
            None,
            question,
        )
        await self._dispatch_quietly(user_id, granted)

    async def cancel(self, user_id: str, task_ids: list[str]) -> None:
        """Cancel tasks that have not started, and start what their slots free."""
        now = self.clock.now()
        granted = await self._apply(
            user_id, lambda led: ledgers.cancel(led, task_ids, now, self.policy)
        )
        await self._dispatch_quietly(user_id, granted)

    async def cancel_task(self, user_id: str, task_id: str, reason: str) -> TaskRecord:
        """``TaskPort.cancel_task``: judged on the ledger inside the write that cancels or
        asks to stop, so a delivery that claims the task meanwhile is asked to stop."""
        now = self.clock.now()

        def change(
            ledger: TaskLedger,
        ) -> tuple[TaskLedger, tuple[TaskRecord | None, list[TaskRecord] | None]]:
            record = ledger.tasks.get(task_id)
            if record is not None and ledgers.cancellable(record):
                updated, granted = ledgers.cancel(ledger, [task_id], now, self.policy)
                return updated, (updated.tasks[task_id], granted)
            if record is not None and record.status == "running":
                updated = ledgers.request_cancel(ledger, task_id, now)
                return updated, (updated.tasks[task_id], None)
            return ledger, (record, None)

        record, granted = await self._apply(user_id, change, Ending(reason))
        if record is not None and granted is not None:
            await self._dispatch_quietly(user_id, granted)
            return record
        if record is not None and record.status == "running":
            return record  # its handler ends it at the tool's next step
        if record is None and await self.sections.get(user_id, task_id) is None:
            # A finished record may have been pruned from the ledger; its section stays.
            raise NotFound(NO_TASK)
        raise TaskFinished("This task has already finished.")

    async def sweep(self, user_id: str) -> None:
        """Grant again the attempts whose lease lapsed (their handler died, or they were
        never enqueued) and start queued tasks while slots are free."""
        now = self.clock.now()
        granted = await self._apply(user_id, lambda led: ledgers.grant(led, now, self.policy))
        await self._dispatch_quietly(user_id, granted)

    async def _dispatch_quietly(self, user_id: str, records: Sequence[TaskRecord]) -> None:
        try:
            await self.dispatch(user_id, records)
        except Exception:
            # Their leases lapse and the next ledger change grants them again.
            log.exception("could not dispatch the next tasks of %s", user_id)


def _following(
    record: TaskRecord, now: datetime, ending: Ending | None, question: str | None
) -> SectionChange:
    """The change that brings a section in line with its ledger record (``follow``)."""

    def change(section: TaskDocument | None) -> TaskDocument | None:
        try:
            return follow(section, record, now, ending, question)
        except IllegalTransition:
            # A bug in a view: the ledger, which decides, is written all the same.
            log.exception("task %s: its section cannot follow its record", record.task_id)
            return None

    return change


@dataclass(frozen=True, slots=True)
class LedgerMeter:
    """Reserves a provider call's tokens in the user's ledger and settles them; with
    ``task_id``, each reservation also stops the tool once its user cancelled the task."""

    scheduler: TaskScheduler
    user_id: str
    task_id: str | None = None

    async def reserve(self, tokens: int, kind: str) -> str:
        return await self.scheduler.reserve(self.user_id, tokens, kind, self.task_id)

    async def settle(self, reservation: str, tokens: int) -> None:
        try:
            await self.scheduler.settle(self.user_id, reservation, tokens)
        except Exception:
            # Unsettled, the reservation is charged whole when its lease ends.
            log.warning("%s: reservation %s not settled", self.user_id, reservation, exc_info=True)
