"""``Claims``: a queued run, admitted within its user's limits and claimed for the
delivery that produces it (a queued message, a ``202`` reply, a follow-up to task results
or to people's results, approvals and client tools).

Every model call of a run passes the admission first: a new message's in its opening
(``opening.py``), every other's here. The run takes one of the user's slots, or joins its
conversation's, while today's tokens last (``RunSlot``); it frees its place when it ends,
counting its tokens, however it ends.
"""

from __future__ import annotations

import contextlib

from shared.agent.run.deps import RunDeps
from shared.agent.run.loop import Run
from shared.agent.run.runs import abandon_run
from shared.agent.run.watch import Watch
from shared.agent.sending.draft import run_of
from shared.agent.sending.queued import claim_queued_run, hold_queued
from shared.errors import AlreadyAnswered, NotFound, RateLimited, SlotsTaken
from shared.schemas.documents import Conversation, MessageError

WAITING = (
    "Spark AI Agent is writing as many replies for you as it may at once; this one "
    "starts as soon as one of them ends."
)


class Claims:
    """Claims of queued runs; one per process."""

    def __init__(self, deps: RunDeps, watch: Watch) -> None:
        self._deps = deps
        self._watch = watch

    async def claim(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """A queued run, admitted and claimed for this delivery (``None``: taken care of
        already, waiting for a slot, ended because today's tokens are spent, or its
        conversation deleted since)."""
        try:
            return await self._claim(user_id, conversation_id, run_id)
        except NotFound:
            # Deleted by its owner or an erasure after the run was queued (the store's
            # own answer, not a memory): nothing is left to reply in, and a 404 would
            # have the queue deliver it again until its attempts run out.
            return None

    async def _claim(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        slot = self._watch.slot(user_id, run_id)
        try:
            await slot.take(conversation_id, wait=True)
        except SlotsTaken:
            await self._hold(user_id, conversation_id, run_id)
            return None
        except RateLimited as exc:
            await self._end_refused(user_id, conversation_id, run_id, exc)
            return None
        lease_until = self._deps.clock.now() + self._watch.lease()
        label = self._deps.label
        claimed: Conversation | None = None
        # Freed should the claim fail; not if another delivery produces it (its place
        # stays), or it was closed (``AlreadyAnswered``).
        async with slot:
            with contextlib.suppress(AlreadyAnswered):
                claimed = await self._deps.store.mutate(
                    user_id,
                    conversation_id,
                    lambda c: claim_queued_run(c, run_id, lease_until, label),
                )
        if claimed is None:
            await slot.release_if_over(await self._deps.store.get(user_id, conversation_id))
            return None
        record = claimed.active_run
        assert record is not None
        return run_of(self._deps, user_id, claimed, record)

    async def _hold(self, user_id: str, conversation_id: str, run_id: str) -> None:
        """Keep a queued run refused a slot queued, saying why; a slot that frees wakes
        it (``release_run``), and its watchdog tries it again should that be lost."""
        lease_until = self._deps.clock.now() + self._watch.lease()
        conversation = await self._deps.store.mutate(
            user_id, conversation_id, lambda c: hold_queued(c, run_id, WAITING, lease_until)
        )
        active = conversation.active_run
        if active is not None and active.run_id == run_id and active.status == "queued":
            await self._watch.watchdog(user_id, conversation_id, active)

    async def _end_refused(
        self, user_id: str, conversation_id: str, run_id: str, refused: RateLimited
    ) -> None:
        """End a queued run with the refusal the user reads in its message, and hand on
        the next queued message (refused in turn, each with its own reply)."""
        error = MessageError(code=refused.code, message=refused.message)
        now = self._deps.clock.now()
        later = now + self._watch.lease()
        conversation = await self._deps.store.mutate(
            user_id,
            conversation_id,
            lambda c: abandon_run(c, run_id, error, now, later, queued_only=True),
        )
        await self._watch.slot(user_id, run_id).release_if_over(conversation)
        await self._watch.hand_on(user_id, conversation)
