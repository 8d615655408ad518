"""``Watch``: what keeps a run from being lost when its producer dies. A delayed Cloud
Task, the watchdog, is scheduled before any run opens: when it fires it closes the run if
its producer died, produces it if nobody did, or looks again when the run's lease next
lapses (``supervision.py``). A queued run is handed to a task; a run whose lease lapsed
is closed by the next write that finds it.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from shared.agent.run.deps import RunDeps
from shared.agent.run.runs import abandon_run, close_stale_run
from shared.agent.run.slot import RunSlot
from shared.agent.sending.queued import renew_queued
from shared.errors import ConversationTooLarge, SparkError
from shared.queue.port import RunQueue
from shared.schemas.documents import ActiveRun, Conversation, MessageError

log = logging.getLogger(__name__)


class Watch:
    """Watchdogs, hand-ons and the closing of dead runs; one per process."""

    def __init__(self, deps: RunDeps, queue: RunQueue) -> None:
        self._deps = deps
        self._queue = queue

    def lease(self) -> timedelta:
        """How long a run's (or a queued run's) lease lasts from when it is written."""
        return self._deps.limits.lease

    def slot(self, user_id: str, run_id: str) -> RunSlot:
        """Run ``run_id``'s place among the user's run slots."""
        return RunSlot(self._deps.slots, self._queue, user_id, run_id)

    async def watchdog(self, user_id: str, conversation_id: str, record: ActiveRun) -> None:
        """Have a task check on ``record`` once its lease lapses (a queue that refuses
        is logged: the next send or stop in the conversation closes a dead run too)."""
        try:
            await self._queue.enqueue_watchdog(user_id, conversation_id, record)
        except SparkError as exc:
            # The next send closes a dead run too (``open_run``); say so and go on.
            log.warning("run %s: no watchdog (%s)", record.run_id, exc)

    async def hand_on(self, user_id: str, conversation: Conversation) -> None:
        """If ``conversation`` now has a queued run (the next queued message), have a task
        produce it."""
        active = conversation.active_run
        if active is not None and active.status == "queued":
            await self._queue.hand_on(user_id, conversation.id, active)

    async def hand_to_task(self, user_id: str, conversation_id: str, record: ActiveRun) -> None:
        """Have a Cloud Task produce the queued run just opened (with its watchdog).

        Raises:
            QueueUnavailable: the queue refused it; the run was closed as an error, so
                nothing waits for a reply that will not come.
        """
        try:
            await asyncio.gather(
                self.watchdog(user_id, conversation_id, record),
                self._queue.enqueue_reply(user_id, conversation_id, record.run_id),
            )
        except SparkError as exc:
            error = MessageError(code=exc.code, message=exc.message)
            now = self._deps.clock.now()
            later = now + self.lease()
            await self._deps.store.mutate(
                user_id,
                conversation_id,
                lambda c: abandon_run(c, record.run_id, error, now, later),
            )
            await self.slot(user_id, record.run_id).release()
            raise

    async def close_if_dead(self, user_id: str, conversation_id: str) -> Conversation:
        """Close the active run if its lease lapsed (no write when it has not)."""
        now = self._deps.clock.now()
        lease_until = now + self.lease()

        def close(conversation: Conversation, cut: bool = False) -> tuple[Conversation, str | None]:
            before = conversation.active_run.run_id if conversation.active_run else None
            closed = close_stale_run(conversation, now, lease_until, cut=cut)
            return renew_queued(closed, now, lease_until), before

        try:
            conversation, before = await self._deps.store.apply(user_id, conversation_id, close)
        except ConversationTooLarge:
            # Full: close it all the same, keeping a note instead of its text.
            conversation, before = await self._deps.store.apply(
                user_id, conversation_id, lambda c: close(c, cut=True)
            )
        active = conversation.active_run
        if before is not None:
            await self.slot(user_id, before).release_if_over(conversation)  # producer died
        # It opened the next queued message, or found a queued run nobody took: hand on.
        if (
            active is not None
            and active.status == "queued"
            and (active.run_id != before or active.lease_expires_at == lease_until)
        ):
            await self.hand_on(user_id, conversation)
        return conversation
