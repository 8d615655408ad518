"""A run's first model request, started while its admission and the user's message are
still being written (``HeadStart``).

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
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from shared.llm.base import Finish, ModelEvent, ModelRequest
from shared.schemas.documents import Conversation


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
