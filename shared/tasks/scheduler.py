"""Handing task tool calls to the queue, within each user's concurrency limit."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from shared.clock import Clock
from shared.queue.base import QueuedTask, TaskQueue
from shared.schemas.server import TaskLedger, TaskRecord
from shared.schemas.tasks import ReplyTask, ToolTask
from shared.store.base import ConversationStore, TaskLedgerStore
from shared.tasks import ledger as ledgers
from shared.tasks.conversation import record_results
from shared.tasks.naming import attempt_name, reply_name, task_id_for
from shared.tools.base import error_output

log = logging.getLogger(__name__)

R = TypeVar("R")

Call = tuple[str, str, str]
"""(tool call id, tool name, display text)"""

NOT_STARTED = "Spark AI Agent could not start this in the background; please ask again."


@dataclass
class TaskScheduler:
    """Admits tasks against the per-user limit and enqueues the attempts granted."""

    ledger: TaskLedgerStore
    store: ConversationStore
    queue: TaskQueue
    clock: Clock
    policy: ledgers.LedgerPolicy

    async def apply(self, user_id: str, change: Callable[[TaskLedger], tuple[TaskLedger, R]]) -> R:
        """Apply a ledger change and return what it decided (from the attempt that landed)."""
        outcome: list[R] = []

        def mutation(ledger: TaskLedger) -> TaskLedger:
            ledger, result = change(ledger)
            outcome[:] = [result]
            return ledger

        await self.ledger.mutate(user_id, mutation)
        return outcome[0]

    async def submit(self, user_id: str, conversation_id: str, calls: Sequence[Call]) -> None:
        """Queue the calls' tasks and dispatch those that may start now.

        Raises:
            StoreError, QueueUnavailable: nothing may have been queued.
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
                ledger, dispatch = ledgers.submit(ledger, record, now, self.policy)
                granted.update((r.task_id, r) for r in dispatch)
            return ledger, [ledger.tasks[k] for k in granted]

        await self.dispatch(user_id, await self.apply(user_id, change))

    async def dispatch(self, user_id: str, records: Sequence[TaskRecord]) -> None:
        """Enqueue the granted attempts.

        An attempt that cannot be enqueued keeps its slot until its lease lapses; the
        next change to the ledger then grants it again.

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

    async def enqueue_reply(self, user_id: str, conversation_id: str, run_id: str) -> None:
        """Have a task produce the reply of a run opened by a ``202`` send."""
        payload = ReplyTask(user_id=user_id, conversation_id=conversation_id, run_id=run_id)
        await self.queue.enqueue(QueuedTask(reply_name(run_id), payload.to_bytes()))

    async def abandon(self, user_id: str, conversation_id: str, calls: Sequence[Call]) -> None:
        """Record calls that could not be queued as failed, so nothing waits for them."""
        now = self.clock.now()
        results = {call_id: error_output(NOT_STARTED) for call_id, _, _ in calls}
        try:
            await self.store.mutate(
                user_id,
                conversation_id,
                lambda c: record_results(c, results, "error", now, task_error=NOT_STARTED),
            )
        except Exception:
            log.exception("could not record unqueued tasks of %s as failed", conversation_id)
        task_ids = [task_id_for(conversation_id, call_id) for call_id, _, _ in calls]
        try:
            await self.apply(
                user_id, lambda led: (ledgers.abandon(led, task_ids, now, NOT_STARTED), None)
            )
        except Exception:
            log.exception("could not release the tasks of %s", conversation_id)
