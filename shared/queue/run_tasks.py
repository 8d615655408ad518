"""The tasks that produce, watch over and follow up runs (``RunQueue``, in
``shared/queue/port.py``): each one named so that a redelivery or a second enqueue of the
same work is one task (``naming.py``). ``TaskScheduler`` is one; it lives here, below
the agent that enqueues them, as it needs nothing of the ledger.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta

from shared.clock import Clock
from shared.ids import task_id_for
from shared.queue.base import QueuedTask, TaskQueue
from shared.queue.naming import expire_name, follow_up_name, reply_name, watchdog_name
from shared.schemas.documents import ActiveRun
from shared.schemas.tasks import ExpireTask, FollowUpTask, ReplyTask, WatchdogTask

log = logging.getLogger(__name__)


class RunTasks:
    """Enqueues the replies, watchdogs, follow-ups and client calls' expiries of runs."""

    queue: TaskQueue
    clock: Clock
    watchdog_grace: timedelta

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
