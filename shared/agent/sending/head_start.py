"""A run's first model request, started while its admission and the user's message are
still being written: ``HeadStarts`` asks it, ``HeadStart`` holds its stream until the run
takes it.

The commit a send makes before its run may stream (the ledger's admission and the
conversation's append) took most of the first token's time when it ran before the model
was asked (bench/stream_overhead.py (a) measures it). The request it leads to is known
before it is written, so it is sent at once and its events only kept here: nothing is
shown or written until the run takes them (``take``), which it does only for the very
request the committed conversation gives: a head start built on that very conversation
(``guess``) asked for it already, screened as it was sent, so the run builds none; on
another, the run builds its own and takes the head start only if they are equal. A
refused or failed send, or a different request (someone wrote to the conversation
meanwhile), ``discard``s it: the provider's request is cancelled (usually before its
first byte). Like every model call it reserved its tokens from the user's day before
it left (the egress's meter), so a user without budget sends none, and what it used is
counted however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.agent.run.deps import RunDeps
from shared.agent.run.runs import open_run
from shared.agent.sending.draft import Draft, new_conversation, run_of
from shared.egress.screen import Screening
from shared.errors import RateLimited
from shared.llm.base import Finish, ModelEvent, ModelRequest
from shared.schemas.documents import Conversation

log = logging.getLogger(__name__)
# How long a user refused a reply goes without head starts (``HeadStarts.refused``).
_REFUSED_FOR = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class _End:
    """The provider's stream ended (``error``: how it failed)."""

    error: BaseException | None = None


class _Handover:
    """The pump stopped reading: the taker reads the rest of the stream itself."""


_HANDOVER = _Handover()


class HeadStart:
    """One model request in flight whose events nobody has seen yet."""

    def __init__(
        self,
        request: ModelRequest,
        stream: AsyncGenerator[ModelEvent, None],
        guess: Conversation | None = None,
    ) -> None:
        self.request = request
        # The conversation ``request`` was built on: a run on this very conversation
        # would build this very request, so it takes it without building its own.
        self.guess = guess
        self._stream = stream
        self._events: asyncio.Queue[ModelEvent | _End | _Handover] = asyncio.Queue()
        self._taken = False
        self._handover = False  # taken by a run: the pump hands the stream over
        # The reply finished before anyone took it: its stream is left open, not read to
        # its end, since the egress counts its tokens as it closes, and they must not be
        # counted before the send's admission (they would refuse the send they are for).
        self._kept = False
        self._task = asyncio.create_task(self._pump(stream))

    async def _pump(self, stream: AsyncGenerator[ModelEvent, None]) -> None:
        handed = False
        try:
            async for event in stream:
                self._events.put_nowait(event)
                if isinstance(event, Finish):  # nothing follows it
                    self._kept = True
                    break
                if self._handover:
                    # The run reads the rest itself (``_replay``): through this task and the
                    # queue each token cost one more task switch and a queue pass (the
                    # queue alone 1.2 % of the api's py-spy samples on 50 tokens/s streams).
                    self._events.put_nowait(_HANDOVER)
                    handed = True
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # replayed to whoever takes it, as if it failed then
            self._events.put_nowait(_End(exc))
        else:
            self._events.put_nowait(_End())
        finally:
            if not handed and not self._kept:
                await stream.aclose()

    def take(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None] | None:
        """The events of ``request`` (those kept, then the rest as they come), or ``None``
        when this head start asked for something else (then discard it)."""
        if self._taken or request != self.request:
            return None
        self._taken = self._handover = True
        return self._replay()

    async def _replay(self) -> AsyncGenerator[ModelEvent, None]:
        handed = False
        try:
            while True:
                item = await self._events.get()
                if isinstance(item, _Handover):
                    handed = True
                    break
                if isinstance(item, _End):
                    if item.error is not None:
                        raise item.error
                    return
                yield item
            async for event in self._stream:  # the rest, straight from the provider
                yield event
        finally:
            # The run stopped reading (a stop, a takeover): the request goes with it.
            if handed or self._kept:
                await self._stream.aclose()
            else:
                self._task.cancel()

    async def discard(self) -> None:
        """Cancel the request unless a run took it (the egress settles its reservation
        to what it used as its stream closes)."""
        if self._taken:
            return
        self._taken = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self._kept:
            await self._stream.aclose()


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
