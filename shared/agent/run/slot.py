"""``RunSlot``: a run's place among its user's run slots, taken and freed in one place.

Every model call of a run passes the admission first (``take``, or a send's admission in
the same commit as its message, ``RunSlots.admit_and_open``); the place is freed,
counting the run's tokens, however the run ends (``release``, or with the run's final
write in one commit: ``close``), and the runs that waited for a place are handed to
tasks. Used as an async context manager, the slot is freed should the block fail: the
work between a run's admission and its opening (reading a message's files, transcribing
its clip, writing its message) holds it only while it goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType

from shared.queue.port import RunQueue
from shared.schemas.documents import Conversation
from shared.store.slots import RunSlots, Woken

log = logging.getLogger(__name__)


class RunSlot:
    """The place of run ``run_id`` among the run slots of ``user_id``."""

    def __init__(self, slots: RunSlots, queue: RunQueue, user_id: str, run_id: str) -> None:
        self._slots = slots
        self._queue = queue
        self.user_id = user_id
        self.run_id = run_id

    async def take(
        self, conversation_id: str, *, wait: bool = False, voice_session: str | None = None
    ) -> None:
        """Take one of the user's slots (or join the conversation's), while today's
        tokens last (``RunSlots.admit_run``, whose refusals it raises)."""
        await self._slots.admit_run(
            self.user_id, self.run_id, conversation_id, wait=wait, voice_session=voice_session
        )

    async def release(self, tokens: int = 0) -> None:
        """Free the place (if the run took one), counting ``tokens`` against today's,
        and hand the runs that waited for a place to tasks (idempotent; never raises)."""
        try:
            woken = await self._slots.release_run(self.user_id, self.run_id, tokens)
        except Exception:
            # The slot lapses by itself (``UserLimits.slot``); only the count is lost.
            log.warning("run %s: could not release its slot", self.run_id, exc_info=True)
            return
        await self._wake(woken)

    async def close(
        self,
        conversation_id: str,
        closing: Callable[[Conversation | None], Conversation],
        tokens: int = 0,
        reserve: int = 0,
    ) -> Conversation:
        """Write the run's end (``closing``) and free the place, counting ``tokens``, in
        one commit (``RunSlots.close_and_release``, whose refusals it raises: then
        nothing was written and the place is still taken), then wake who waited."""
        conversation, woken = await self._slots.close_and_release(
            self.user_id, self.run_id, conversation_id, closing, tokens, reserve=reserve
        )
        await self._wake(woken)
        return conversation

    async def _wake(self, woken: Woken) -> None:
        for conversation_id, waiting in woken:
            try:
                await self._queue.enqueue_reply(
                    self.user_id, conversation_id, waiting, after=self.run_id
                )
            except Exception:
                # Its watchdog tries it again when its lease lapses.
                log.warning("run %s: not woken yet", waiting, exc_info=True)

    async def release_if_over(self, conversation: Conversation | None) -> None:
        """Free the place unless the run is ``conversation``'s live run (a 202 send took
        it at once; an admission may have taken it again for a run now over)."""
        active = conversation.active_run if conversation is not None else None
        if active is None or active.run_id != self.run_id:
            await self.release()

    async def __aenter__(self) -> RunSlot:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is not None:
            await self.release()
