"""A run's place among its user's run slots freed as the run ends (``RunReleases``):
on its own (``release_run``), or in the same commit as the run's final write
(``close_and_release``), which saves a message one commit. ``TaskScheduler`` is one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from shared.clock import Clock
from shared.errors import StoreError
from shared.schemas.documents import Conversation
from shared.schemas.server import TaskLedger
from shared.store.base import OpeningStore
from shared.tasks import ledger as ledgers

log = logging.getLogger(__name__)

R = TypeVar("R")
Woken = list[tuple[str, str]]


class RunReleases:
    """Frees runs' slots, counting their tokens, and wakes the runs that waited."""

    clock: Clock
    limits: ledgers.UserLimits
    openings: OpeningStore | None

    async def _apply(self, user_id: str, change: Callable[[TaskLedger], tuple[TaskLedger, R]]) -> R:
        raise NotImplementedError  # the ledger's one way to change (``TaskScheduler``)

    async def enqueue_reply(
        self, user_id: str, conversation_id: str, run_id: str, after: str | None = None
    ) -> None:
        raise NotImplementedError  # (``RunTasks``)

    def _openings(self) -> OpeningStore:
        if self.openings is None:
            raise StoreError("No opening store was given to this scheduler.")
        return self.openings

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
        await self._wake(user_id, run_id, woken)

    async def close_and_release(
        self,
        user_id: str,
        run_id: str,
        conversation_id: str,
        closing: Callable[[Conversation | None], Conversation],
        tokens: int,
        *,
        reserve: int = 0,
    ) -> Conversation:
        """``RunLedger.close_and_release``: ``closing`` and ``release_run``'s change in one
        commit (``OpeningStore``: both land or neither), then the runs that waited woken.
        A run's slot holds no task, so no task's section follows this ledger change."""
        now = self.clock.now()

        def change(
            ledger: TaskLedger, conversation: Conversation | None
        ) -> tuple[TaskLedger, Conversation, Woken]:
            released, woken = ledgers.release_run(ledger, run_id, now, tokens, self.limits)
            return released, closing(conversation), woken

        store = self._openings()
        conversation, woken = await store.open(
            user_id, conversation_id, change, new=False, reserve=reserve
        )
        await self._wake(user_id, run_id, woken)
        return conversation

    async def _wake(self, user_id: str, run_id: str, woken: Woken) -> None:
        for conversation_id, waiting in woken:
            try:
                await self.enqueue_reply(user_id, conversation_id, waiting, after=run_id)
            except Exception:
                # Its watchdog tries it again when its lease lapses.
                log.warning("run %s: not woken yet", waiting, exc_info=True)
