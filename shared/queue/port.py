"""The port of the work handed to Cloud Tasks, split by who uses it: the tasks that
produce, watch over and follow up runs (``RunQueue``), and task tool calls
(``TaskTools``). ``TaskPort`` is both; ``shared.tasks.scheduler.TaskScheduler``
implements it over the user's ledger and the queue. A run's slot is taken and freed
below both, in the store (``shared/store/slots.py``); the model calls of runs and task
tools are metered by the user's budget (``shared/budget``), not here.

It lives here, below both of its users, so that ``shared.agent`` (runs submit tasks, the
agent schedules runs' replies and watchdogs) depends on it without
depending on ``shared.tasks``, which depends on the agent (its handler drives runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Literal, Protocol

from shared.schemas.documents import ActiveRun, KeyOutput
from shared.schemas.server import TaskRecord
from shared.store.base import SectionChange

Call = tuple[str, str, str]
"""(tool call id, tool name, display text)"""

Claimed = TaskRecord | Literal["busy", "stale"]
"""The attempt's record: this delivery owns it. ``busy``: another delivery holds it
(retry later). ``stale``: the attempt is over or superseded (acknowledge, do nothing)."""

Ended = Literal["completed", "failed", "cancelled"]


class TaskTools(Protocol):
    """Task tool calls within each user's limits (the agent's runs submit them, the
    tasks function runs them)."""

    # -- task tool calls: submit ─▶ dispatch ─▶ claim ─▶ renew … ─▶ reschedule | finish

    async def submit(
        self,
        user_id: str,
        conversation_id: str,
        calls: Sequence[Call],
        again: bool = False,
        *,
        answered: bool = False,
    ) -> list[TaskRecord]:
        """Record the calls' tasks in the user's ledger (once each); returns the attempts
        granted now, to ``dispatch`` once the run's message is saved (``again``: queue
        anew a task that ended cancelled, or that waits for its user's answer; with
        ``answered``, only one that waits: a task its user cancelled stays cancelled).

        Raises:
            StoreError: nothing was recorded.
            RateLimited: the user has too many tasks waiting or running.
        """
        ...

    async def dispatch(self, user_id: str, records: Sequence[TaskRecord]) -> None:
        """Enqueue granted attempts (an attempt not enqueued is granted again later).

        Raises:
            QueueUnavailable: from the first attempt the queue refused.
        """
        ...

    async def claim(
        self, user_id: str, task_id: str, attempt: int, section: SectionChange | None = None
    ) -> Claimed:
        """Let this delivery of ``attempt`` run it (and hold its lease); ``section``, a
        change to the task's section written with the claim (not when refused)."""
        ...

    async def renew(self, user_id: str, task_id: str, attempt: int) -> None:
        """Extend the lease of a running attempt by a full lease from now (a superseded
        attempt changes nothing).

        Raises:
            StoreError: it was not extended.
        """
        ...

    async def reschedule(
        self, user_id: str, task_id: str, attempt: int, delay: timedelta, error: str | None
    ) -> None:
        """Grant the next attempt, keeping the slot, and enqueue it to start after ``delay``.

        Raises:
            QueueUnavailable: it was granted but not enqueued (granted again when its
                lease lapses).
        """
        ...

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
        """End the task, free its slot, and start the next queued tasks; its section
        ends with ``summary`` and ``key_outputs`` (or ``error`` told plainly) in the
        same write as its ledger record (both land, or neither)."""
        ...

    async def show(self, user_id: str, task_id: str, change: SectionChange) -> None:
        """Apply a change to the task's section (its start, its progress steps).

        Raises:
            StoreError: it was not written.
        """
        ...

    async def cancel(self, user_id: str, task_ids: list[str]) -> None:
        """Cancel the tasks that have not started (their slots free at once)."""
        ...

    async def cancel_conversation(self, user_id: str, conversation_id: str) -> None:
        """Cancel every task of the conversation (it is being deleted), in one write:
        those not started end at once (their slots free) and, with those ended before,
        leave the ledger (``forget_conversation``); a running one is asked to stop at
        its tool's next step."""
        ...

    async def forget_conversation(self, user_id: str, conversation_id: str) -> None:
        """Drop the ended records of a deleted conversation's tasks from the ledger (a
        task that was running when it was deleted, once it has ended)."""
        ...

    async def cancel_task(self, user_id: str, task_id: str, reason: str) -> TaskRecord:
        """Cancel one of the user's tasks and return its record. One that has not started
        (or waits for its user's answer) is cancelled at once: its section ends with
        ``reason``, its slot frees. One whose tool is running is asked to stop (its
        record stays ``running``): its handler ends it at the tool's next step.

        Raises:
            NotFound: the user has no task with this id.
            TaskFinished: it has already ended.
        """
        ...

    async def check_cancel(self, user_id: str, task_id: str) -> None:
        """A task tool's progress step: stop here if its user cancelled the task (judged
        on a fresh read of the ledger).

        Raises:
            TaskCancelled: its user asked it to stop.
        """
        ...

    async def wait(self, user_id: str, task_id: str, attempt: int, question: str) -> None:
        """The task asked its user ``question``: it waits, without its slot or lease, until
        the answer queues it again (``submit`` with ``again``); its section shows the
        question from the same write."""
        ...

    async def sweep(self, user_id: str) -> None:
        """Grant again, and enqueue, task attempts whose lease lapsed unclaimed, and start
        queued tasks while slots are free."""
        ...


class RunQueue(Protocol):
    """The tasks that produce, watch over and follow up runs."""

    async def enqueue_reply(
        self, user_id: str, conversation_id: str, run_id: str, after: str | None = None
    ) -> None:
        """Have a task produce a queued run.

        Raises:
            QueueUnavailable: the queue did not take it.
        """
        ...

    async def enqueue_watchdog(self, user_id: str, conversation_id: str, run: ActiveRun) -> None:
        """Have a task check on ``run`` once its lease has lapsed (plus a grace period).

        Raises:
            QueueUnavailable: the queue did not take it.
        """
        ...

    async def hand_on(self, user_id: str, conversation_id: str, run: ActiveRun) -> None:
        """Have a task produce the queued ``run`` (and a watchdog check on it); never raises."""
        ...

    async def enqueue_follow_up(
        self, user_id: str, conversation_id: str, message_id: str, attempt: int = 0
    ) -> None:
        """Have a task continue the agent after ``message_id`` once the conversation is free."""
        ...

    async def expire_client_calls(
        self, user_id: str, conversation_id: str, call_ids: Sequence[str], delay_seconds: float
    ) -> None:
        """Give the client calls a synthetic result if still unanswered after the delay."""
        ...


class TaskPort(TaskTools, RunQueue, Protocol):
    """All of it: what ``TaskScheduler`` implements, and what the wiring hands out."""
