"""``HeadStarts``: asking the model for a plain message's reply while its admission and
its message are written, so those commits are off the first token's time
(bench/stream_overhead.py (a) measures it). ``head_start.py`` holds the stream so begun.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta

from shared.agent.run.deps import RunDeps
from shared.agent.run.runs import open_run
from shared.agent.sending.draft import Draft, new_conversation, run_of
from shared.agent.sending.head_start import HeadStart
from shared.egress.screen import Screening
from shared.errors import RateLimited

log = logging.getLogger(__name__)
# How long a user refused a reply goes without head starts (``HeadStarts.refused``).
_REFUSED_FOR = timedelta(seconds=60)

Early = asyncio.Task[HeadStart | None]


class HeadStarts:
    """Head starts of this process's sends, and the users who go without them."""

    def __init__(self, deps: RunDeps) -> None:
        self._deps = deps
        # Users this process saw refused a reply (a limit), and when: their next sends
        # get no head start for a while, so a user past a limit does not have each
        # refused send's prompt go to the provider first. A guess, in this process only:
        # it only ever withholds a head start, never decides a send.
        self._refused: dict[str, datetime] = {}

    def refused(self, user_id: str) -> None:
        """``user_id`` was refused a reply for a user limit: no head starts for a while."""
        self._refused[user_id] = self._deps.clock.now()

    def may_start(self, user_id: str) -> bool:
        """No head start for a user refused here within ``_REFUSED_FOR``."""
        now = self._deps.clock.now()
        self._refused = {u: t for u, t in self._refused.items() if now - t < _REFUSED_FOR}
        return user_id not in self._refused

    async def start(self, draft: Draft) -> Early:
        """Ask the model for ``draft``'s reply now, and return once the request is on its
        way (or no head start will be made): the opening's commit goes after it. The
        request waits on the egress's screen, a fresh read; left to run beside the
        opening's own reads and CPU (the ledger, encoding the commit), that read's
        answer waited behind them and the request left later, where the commit starting
        a little later costs the reply nothing: the model is slower than the commit
        (bench/stream_overhead.py (a), time to first token)."""
        asked = asyncio.Event()
        early = asyncio.create_task(self._head_start(draft, asked))
        try:
            await asked.wait()
        except BaseException:
            await self.drop(early)
            raise
        # The head start's pump sends the request on its first turn.
        await asyncio.sleep(0)
        return early

    async def _head_start(self, draft: Draft, asked: asyncio.Event) -> HeadStart | None:
        """The first model request of ``draft``'s run, sent on the conversation its
        opening should leave (a new one: fully known; an existing one: read now, a guess
        the run checks against what is committed). ``None``: no good guess. ``asked`` is
        set once the request is handed to its pump, or none will be. The egress's
        screen reads afresh before the request leaves: that read is begun at once,
        beside the conversation's, not after it."""
        screening = self._deps.model.screening(draft.user.uid)
        try:
            return await self._ask(draft, screening)
        finally:
            asked.set()
            if not screening.taken:
                await screening.close()

    async def _ask(self, draft: Draft, screening: Screening) -> HeadStart | None:
        user_id, message, record = draft.user.uid, draft.message, draft.record
        try:
            if draft.new:
                guess = new_conversation(draft.user, draft.conversation_id, message, record)
            else:
                stored = await self._deps.store.get(user_id, draft.conversation_id)
                if stored is None:
                    return None
                queue = self._deps.limits.queue
                guess = open_run(stored, message, record, draft.when_busy, queue)
            active = guess.active_run
            if active is None or active.run_id != record.run_id:
                return None  # it would wait, queued
            request = await run_of(self._deps, user_id, guess, record).first_request()
        except Exception as exc:  # only a head start lost: the run asks once opened
            log.debug("run %s: no head start (%s)", record.run_id, exc)
            return None
        try:
            # Reserved from the user's day before it leaves, as every model call: a
            # user without budget sends none (the run is refused or asks itself).
            stream = await self._deps.model.chat(user_id, request, screening)
        except RateLimited:
            self.refused(user_id)
            return None
        return HeadStart(request, stream, guess)

    @staticmethod
    async def drop(early: Early | None) -> None:
        """Cancel a head start whose run will not stream here (refused, failed, queued)."""
        if early is None:
            return
        early.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            head = await early
            if head is not None:
                await head.discard()
