"""``RunSlot``: a run's place among its user's run slots, taken and freed in one place.

Every model call of a run passes the admission first (``take``, or a send's admission in
the same commit as its message, ``RunLedger.admit_and_open``); the place is freed,
counting the run's tokens, however the run ends (``release``, or with the run's final
write in one commit: ``close``). Used as an async context
manager, the slot is freed should the block fail: the work between a run's admission
and its opening (reading a message's files, transcribing its clip, writing its message)
holds it only while it goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from shared.queue.port import RunLedger
from shared.schemas.documents import Conversation


class RunSlot:
    """The place of run ``run_id`` among the run slots of ``user_id``."""

    def __init__(self, ledger: RunLedger, user_id: str, run_id: str) -> None:
        self._ledger = ledger
        self.user_id = user_id
        self.run_id = run_id

    async def take(
        self, conversation_id: str, *, wait: bool = False, voice_session: str | None = None
    ) -> None:
        """Take one of the user's slots (or join the conversation's), while today's
        tokens last (``RunLedger.admit_run``, whose refusals it raises)."""
        await self._ledger.admit_run(
            self.user_id, self.run_id, conversation_id, wait=wait, voice_session=voice_session
        )

    async def release(self, tokens: int = 0) -> None:
        """Free the place (if the run took one), counting ``tokens`` against today's
        (idempotent; never raises)."""
        await self._ledger.release_run(self.user_id, self.run_id, tokens)

    async def close(
        self,
        conversation_id: str,
        closing: Callable[[Conversation | None], Conversation],
        tokens: int,
        reserve: int = 0,
    ) -> Conversation:
        """Write the run's end (``closing``) and free the place, counting ``tokens``, in
        one commit (``RunLedger.close_and_release``, whose refusals it raises: then
        nothing was written and the place is still taken)."""
        return await self._ledger.close_and_release(
            self.user_id, self.run_id, conversation_id, closing, tokens, reserve=reserve
        )

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
