"""Handing work to Cloud Tasks: task tool calls within each user's concurrency limit,
the replies of queued runs, and the watchdogs that close runs whose producer died."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeVar

from shared.budget.service import CANCELLED
from shared.clock import Clock
from shared.errors import NotFound, TaskCancelled, TaskFinished
from shared.ids import task_id_for
from shared.queue.base import QueuedTask, TaskQueue
from shared.queue.naming import attempt_name
from shared.queue.port import Call, Claimed, Ended
from shared.queue.run_tasks import RunTasks
from shared.schemas.documents import KeyOutput
from shared.schemas.server import TaskLedger, TaskRecord
from shared.schemas.tasks import ToolTask
from shared.store.base import SectionChange, TaskDocumentStore, TaskLedgerStore
from shared.store.memory import InMemoryTaskDocumentStore
from shared.tasks import ledger as ledgers
from shared.tasks.sections import Ending, following

log = logging.getLogger(__name__)

R = TypeVar("R")
NO_TASK = "No task with this id."
CONVERSATION_DELETED = "Cancelled: its conversation was deleted."


@dataclass
class TaskScheduler(RunTasks):
    """Admits tasks against the per-user limit and enqueues the attempts granted: the
    ``TaskPort`` (``shared/queue/port.py``) of the agent and of the task handler. Every
    change to the ledger is one of ``ledger.py``'s pure functions, applied here. The
    user's budget, kept in the same ledger, is ``shared/budget``'s."""

    ledger: TaskLedgerStore
    queue: TaskQueue
    clock: Clock
    policy: ledgers.LedgerPolicy
    watchdog_grace: timedelta
    # Each task's section (``/{uid}/client/tasks/{taskId}``): its start and progress steps
    # are written here (``show``); its status moves with the ledger, written by the
    # ledger store (``apply_with_sections``; in memory, into its own ``sections``).
    sections: TaskDocumentStore = field(default_factory=InMemoryTaskDocumentStore)

    async def _apply(
        self,
        user_id: str,
        change: Callable[[TaskLedger], tuple[TaskLedger, R]],
        ending: Ending | None = None,
        question: str | None = None,
        shown: Callable[[R], Mapping[str, SectionChange]] = lambda _: {},
    ) -> R:
        """Apply a ledger change and return what it decided (from the attempt that landed).
        The sections of the tasks whose status it changes follow their records in the
        same write (``TaskLedgerStore.apply_with_sections``): a finished task's section
        ends, with ``ending``, or waits showing ``question``, exactly when its record
        does, never a write later. ``shown``: other changes to sections, for what was
        decided, in that write too."""
        now = self.clock.now()

        def tracked(
            ledger: TaskLedger,
        ) -> tuple[TaskLedger, R, dict[str, SectionChange]]:
            updated, decided = change(ledger)
            moved = dict(shown(decided))
            moved.update(
                (task_id, following(record, now, ending, question))
                for task_id, record in updated.tasks.items()
                if (before := ledger.tasks.get(task_id)) is None or before.status != record.status
            )
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

    async def claim(
        self, user_id: str, task_id: str, attempt: int, section: SectionChange | None = None
    ) -> Claimed:
        """Let this delivery of ``attempt`` run it: its record, or why not (``section``
        changed in the same write when it is claimed)."""
        now = self.clock.now()

        def change(ledger: TaskLedger) -> tuple[TaskLedger, Claimed]:
            ledger, claim = ledgers.claim(ledger, task_id, attempt, now, self.policy)
            return ledger, ledger.tasks[task_id] if claim == "run" else claim

        def shown(claimed: Claimed) -> dict[str, SectionChange]:
            return {} if section is None or isinstance(claimed, str) else {task_id: section}

        return await self._apply(user_id, change, shown=shown)

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

    async def cancel_conversation(self, user_id: str, conversation_id: str) -> None:
        """``TaskPort.cancel_conversation``."""
        now = self.clock.now()

        def change(ledger: TaskLedger) -> tuple[TaskLedger, list[TaskRecord]]:
            ids = [t for t, r in ledger.tasks.items() if r.conversation_id == conversation_id]
            updated, granted = ledgers.cancel(ledger, ids, now, self.policy)
            for task_id in ids:
                updated = ledgers.request_cancel(updated, task_id, now)
            # Those ended (now, or before) go from the ledger with their sections.
            return ledgers.forget(updated, conversation_id), granted

        granted = await self._apply(user_id, change, Ending(CONVERSATION_DELETED))
        await self._dispatch_quietly(user_id, granted)

    async def forget_conversation(self, user_id: str, conversation_id: str) -> None:
        """``TaskPort.forget_conversation``."""
        await self._apply(user_id, lambda led: (ledgers.forget(led, conversation_id), None))

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

    async def check_cancel(self, user_id: str, task_id: str) -> None:
        """``TaskPort.check_cancel``: a progress step's look at the ledger."""
        if ledgers.cancel_wanted(await self.ledger.get(user_id), task_id):
            raise TaskCancelled(CANCELLED)

    async def _dispatch_quietly(self, user_id: str, records: Sequence[TaskRecord]) -> None:
        try:
            await self.dispatch(user_id, records)
        except Exception:
            # Their leases lapse and the next ledger change grants them again.
            log.exception("could not dispatch the next tasks of %s", user_id)
