"""``Retention``: the daily sweep that deletes conversations untouched for
``SPARK_RETENTION_DAYS`` (DESIGN §15), through the same delete as a user's
(``Conversations.delete``), in bounded pages.

Cloud Scheduler calls the ``tasks`` function once a day with ``{"kind": "retention"}``;
that delivery fixes the cutoff (now less the retention) and deletes one page of the
conversations last changed before it, least recently changed first (one query across
every user's conversations: ``ConversationStore.untouched``). A full page enqueues the
next page, with the same cutoff, under a name made of the cutoff and the page number.

Nothing here is remembered between pages: each page asks the store again, and every
conversation a page handles leaves the query (deleted, or touched since the cutoff and
so kept, or gone meanwhile), so the next page finds the next ones. A redelivered page
finds what is left and enqueues the same next page; two chains (the emulator runs a
task twice, or the scheduler retries) delete nothing twice and both end at the first
page that is not full. Whether a conversation goes is judged by the delete itself, on
the version it removes (its ``updatedAt`` before the cutoff, with the store's
precondition): one touched by any process during the sweep is kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.agent.conversations.manage import Conversations
from shared.clock import Clock
from shared.errors import NotFound
from shared.queue.base import QueuedTask, TaskQueue
from shared.queue.naming import retention_name
from shared.schemas.tasks import RetentionTask
from shared.store.base import ConversationStore

log = logging.getLogger(__name__)

PAGE = 100
"""Conversations one page deletes: each delete is a few reads and commits (the document
with its tombstone, the ledger, its archive and sections listed and deleted), so a page
ends well inside a task's 10 minutes: ``bench/retention.py`` (b) measured 52 ms a
conversation on the Firestore emulator of a loaded machine, about 5 s a page."""


@dataclass(frozen=True, slots=True)
class Swept:
    """What one page did: conversations deleted, kept (touched since the cutoff), and
    the next page enqueued (``None``: the sweep is over, or retention is off)."""

    deleted: int
    kept: int
    next_page: RetentionTask | None


class Retention:
    """Serves the retention sweep's deliveries; one per process."""

    def __init__(
        self,
        store: ConversationStore,
        conversations: Conversations,
        queue: TaskQueue,
        clock: Clock,
        days: int,
        page: int = PAGE,
    ) -> None:
        self._store = store
        self._conversations = conversations
        self._queue = queue
        self._clock = clock
        self._days = days
        self._page = page

    async def sweep(self, task: RetentionTask) -> Swept:
        """Delete one page of the conversations last changed before the task's cutoff
        (or, from the scheduler, ``days`` before now); enqueue the next page if this
        one was full. Retention off (``days`` 0): nothing is deleted.

        Raises:
            StoreError, QueueUnavailable: the page failed part-way (what it deleted
                stays deleted; its redelivery does the rest).
        """
        if self._days <= 0:
            log.info("retention sweep: SPARK_RETENTION_DAYS is not set; nothing deleted")
            return Swept(0, 0, None)
        cutoff = task.cutoff or self._clock.now() - timedelta(days=self._days)
        found = await self._store.untouched(cutoff, self._page)
        deleted = kept = 0
        for old in found:
            try:
                gone = await self._conversations.delete(
                    old.user_id, old.conversation_id, untouched_before=cutoff
                )
            except NotFound:
                continue  # deleted meanwhile (its owner, or another page)
            deleted, kept = deleted + gone, kept + (not gone)
        following = None
        if len(found) >= self._page:
            following = RetentionTask(cutoff=cutoff, page=task.page + 1)
            await self._queue.enqueue(_queued(following, cutoff))
        log.info(
            "retention sweep page %d (before %s): %d deleted, %d kept (touched since)",
            task.page,
            cutoff.isoformat(),
            deleted,
            kept,
        )
        return Swept(deleted, kept, following)


def _queued(task: RetentionTask, cutoff: datetime) -> QueuedTask:
    return QueuedTask(retention_name(cutoff.timestamp(), task.page), task.to_bytes())
