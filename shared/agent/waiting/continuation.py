"""The one path on after a result (``Continuation``): a task's result or its end, a
person's answer, approval or client tool's result, a client call's time running out.
Each is recorded, and in the same write the agent's follow-up opens once every call of
the step has its result and the conversation is free (``open_follow_up``); then it is
produced here, or handed to a task, or (another run holds the conversation) tried again
once the conversation is free.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from shared.agent.run.deps import RunDeps
from shared.agent.run.loop import Run
from shared.agent.run.runs import follow_up_run
from shared.agent.run.watch import Watch
from shared.agent.sending.claims import Claims
from shared.agent.sending.draft import run_of
from shared.agent.sending.queued import claim_queued_run
from shared.agent.waiting.results import FollowUp, open_follow_up
from shared.errors import NotFound, RateLimited, RunInProgress, SlotsTaken, SparkError
from shared.queue.port import RunQueue
from shared.schemas.documents import ActiveRun, Conversation

log = logging.getLogger(__name__)

Record = Callable[[Conversation], tuple[Conversation, str]]
"""A pure change that records a result, and names the message whose calls it answers."""
Change = Callable[[Conversation], tuple[Conversation, tuple[FollowUp, str]]]

# A follow-up waiting for the conversation to be free is tried this many times (backing
# off to a minute) before it is given up.
FOLLOW_UP_ATTEMPTS = 30


@dataclass(frozen=True, slots=True)
class Next:
    """How the agent goes on: ``run``, produce ``run`` here (``None``: it waits for a
    slot, or today's tokens are spent: the conversation shows which); ``handed``, a task
    produces it; ``later``, another run holds the conversation and a task tries again
    once it is free; ``busy``, the same, for the caller to try again; ``over``, nothing
    to follow up (a call still waits for its result, or the follow-up exists)."""

    status: Literal["run", "handed", "later", "busy", "over"]
    run: Run | None = None
    # The conversation as the write that recorded the result left it (``None``: gone).
    conversation: Conversation | None = None


class Continuation:
    """The agent's follow-ups to results; one per process."""

    def __init__(self, deps: RunDeps, watch: Watch, claims: Claims, queue: RunQueue) -> None:
        self._deps = deps
        self._watch = watch
        self._claims = claims
        self._queue = queue

    async def go_on(
        self,
        user_id: str,
        conversation_id: str,
        record: Record,
        *,
        background: bool = False,
        attempt: int | None = 0,
        source: str | None = None,
        reserve: int = 0,
    ) -> Next:
        """Record a result with ``record`` and decide how the agent goes on: its
        follow-up, queued (it passes admission like every run), is claimed here, or with
        ``background`` handed to a task. Should another run hold the conversation, a task
        tries again once it is free (``attempt``: the number of that try, given up past
        ``FOLLOW_UP_ATTEMPTS``; ``None``: the caller tries again itself). ``source``:
        the message whose calls ``record`` answers, when known before it is read; then
        the follow-up produced here is admitted and opened in one commit (``_admitted``).
        ``reserve`` as in ``ConversationStore.mutate``, for a result that is new content.

        Raises:
            NotFound: no such conversation; or as ``record``.
        """
        now = self._deps.clock.now()
        lease_until = now + self._watch.lease()

        def opening(record: Record) -> Change:
            def change(conversation: Conversation) -> tuple[Conversation, tuple[FollowUp, str]]:
                recorded, source_id = record(conversation)
                run = follow_up_run(source_id, now, lease_until, queued=True, model=None)
                opened, found = open_follow_up(recorded, source_id, run)
                return opened, (found, source_id)

            return change

        store = self._deps.store
        found: FollowUp | None = None  # the call not saved yet by the run holding it
        source_id = ""
        if source is not None and not background:
            with contextlib.suppress(RunInProgress, SlotsTaken, RateLimited):
                conversation, (found, source_id) = await self._admitted(
                    user_id, conversation_id, source, record, now, lease_until, reserve
                )
                active = conversation.active_run
                if found == "ours" and active is not None and active.status == "streaming":
                    await self._watched(user_id, conversation_id, active)
                    run = run_of(self._deps, user_id, conversation, active)
                    return Next("run", run, conversation)
            # Refused a place (nothing written): opened queued below, its claim says why.
        if found is None:
            with contextlib.suppress(RunInProgress):
                conversation, (found, source_id) = await store.apply(
                    user_id, conversation_id, opening(record), reserve=reserve
                )
        if found is None or found == "busy":
            # Another run holds the conversation: should its producer have died, it is
            # closed now (a read only when a run was there, as a send's opening does),
            # and the result (or, recorded already, the follow-up to it) tried once more.
            await self._watch.close_if_dead(user_id, conversation_id)
            recorded = source_id
            again = record if found is None else (lambda c: (c, recorded))
            conversation, (found, source_id) = await store.apply(
                user_id, conversation_id, opening(again), reserve=reserve
            )
        if found == "ours":
            active = conversation.active_run
            assert active is not None
            if background:
                await self._watch.hand_to_task(user_id, conversation_id, active)
                return Next("handed", None, conversation)
            await self._watch.watchdog(user_id, conversation_id, active)
            claimed = await self._claims.claim(user_id, conversation_id, active.run_id)
            return Next("run", claimed, conversation)
        if found != "busy":
            return Next("over", None, conversation)
        if attempt is None:
            return Next("busy", None, conversation)
        if attempt > FOLLOW_UP_ATTEMPTS:
            log.warning("follow-up of %s: the conversation stayed busy", source_id)
            return Next("over", None, conversation)
        await self._queue.enqueue_follow_up(user_id, conversation_id, source_id, attempt)
        return Next("later", None, conversation)

    async def follow_up(
        self,
        user_id: str,
        conversation_id: str,
        source_id: str,
        attempt: int | None,
        record: Callable[[Conversation], Conversation] | None = None,
        reserve: int = 0,
    ) -> Next:
        """The agent's follow-up to the results of the calls in ``source_id``, recorded
        already or by ``record`` in the same write; ``attempt`` and ``reserve`` as in
        ``go_on``. A conversation gone: ``over``, with none."""
        recording = record or (lambda c: c)
        try:
            return await self.go_on(
                user_id,
                conversation_id,
                lambda c: (recording(c), source_id),
                attempt=attempt,
                source=source_id,
                reserve=reserve,
            )
        except NotFound:
            return Next("over")

    async def _admitted(
        self,
        user_id: str,
        conversation_id: str,
        source_id: str,
        record: Record,
        now: datetime,
        lease_until: datetime,
        reserve: int,
    ) -> tuple[Conversation, tuple[FollowUp, str]]:
        """Record with ``record`` and open the follow-up to ``source_id`` producing, its
        run admitted in the same commit (``RunSlots.admit_and_open``), as a send's is: one
        commit where a queued follow-up takes three (its opening, its admission, its
        claim). A follow-up queued already (an earlier delivery's) is claimed in it.

        Raises:
            SlotsTaken, RateLimited: nothing was written (the follow-up, opened queued,
                is refused at its claim: it waits for a place, or ends saying why).
            NotFound: no such conversation; or as ``record``.
        """
        deps = self._deps
        run = follow_up_run(source_id, now, lease_until, queued=False, model=deps.label)
        decided: list[tuple[FollowUp, str]] = []

        def change(conversation: Conversation | None) -> Conversation:
            if conversation is None:
                raise NotFound("No conversation with this id.")
            recorded, source = record(conversation)
            opened, found = open_follow_up(recorded, source, run)
            active = opened.active_run
            if found == "ours" and active is not None and active.status == "queued":
                opened = claim_queued_run(opened, active.run_id, lease_until, deps.label)
            decided[:] = [(found, source)]
            return opened

        conversation = await deps.slots.admit_and_open(
            user_id, run.run_id, conversation_id, change, new=False, reserve=reserve
        )
        return conversation, decided[0]

    async def _watched(self, user_id: str, conversation_id: str, run: ActiveRun) -> None:
        """Ask for the watchdog of a follow-up produced here; should the queue refuse,
        the run is produced all the same (a send's is asked for in the background), and
        the next message in the conversation closes it should this process die."""
        try:
            await self._watch.watchdog(user_id, conversation_id, run)
        except SparkError:
            log.warning("run %s: no watchdog", run.run_id, exc_info=True)
