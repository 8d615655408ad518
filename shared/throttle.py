"""Throttled persistence of a streaming message (≤ 1 write per interval, plus a final one)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from shared.clock import Clock
from shared.errors import ConversationTooLarge, NotFound, RunEnded, SparkError

log = logging.getLogger(__name__)

T = TypeVar("T")

Write = Callable[[], Awaitable[Any]]
# Writes that can never succeed: the run was stopped, closed or taken over, the
# document is full, or it was deleted. Retrying cannot help; the run must end instead.
PERMANENT = (RunEnded, ConversationTooLarge, NotFound)


class ThrottledWriter:
    """Calls ``write`` at most once per ``interval`` seconds while there is news.

    ``touch`` is cheap (called once per token); the write itself reads the latest
    state when it runs, so a write always carries everything streamed so far. The
    first interval counts from creation, since creating the message was a write.
    Intermediate writes that fail are logged and retried by the next one; ``finish``
    waits for a write in flight, then makes the final write, retried a few times.
    """

    def __init__(
        self,
        write: Write,
        interval: float,
        clock: Clock,
        on_fatal: Callable[[SparkError], None] | None = None,
    ) -> None:
        self._write = write
        self._interval = interval
        self._clock = clock
        self._on_fatal = on_fatal
        self._last = clock.monotonic()
        # When the latest write succeeded (monotonic): the document was ours then.
        self.last_write = self._last
        self._dirty = asyncio.Event()
        self._closing = False
        self._writing = False
        self._task: asyncio.Task[None] | None = None
        self.writes = 0
        # A write that can never succeed (see PERMANENT); ``on_fatal`` hears of it at once.
        self.fatal: SparkError | None = None

    def touch(self) -> None:
        """There is something new to persist."""
        if self._closing:
            return
        self._dirty.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            delay = self._last + self._interval - self._clock.monotonic()
            if delay > 0:
                await self._clock.sleep(delay)
            self._dirty.clear()
            self._last = self._clock.monotonic()
            self._writing = True
            try:
                await self._write()
                self.writes += 1
                self.last_write = self._clock.monotonic()
            except PERMANENT as exc:
                self.fatal = exc
                if self._on_fatal is not None:
                    self._on_fatal(exc)
                return
            except SparkError as exc:
                log.warning("streaming write failed; the next write will carry it: %s", exc)
            except Exception:
                log.exception("streaming write failed unexpectedly; the next write will carry it")
            finally:
                self._writing = False
            if self._closing:
                return

    async def abandon(self) -> None:
        """Stop the periodic writes without a final one (the run is no longer ours)."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def finish(self, final: Callable[[], Awaitable[T]], attempts: int = 3) -> T:
        """Stop the periodic writes and make the final one; what it returned.

        Raises:
            SparkError: the final write failed ``attempts`` times.
        """
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            if not self._writing:
                task.cancel()
            # Waited for, not awaited: a cancellation of the caller must not be mistaken
            # for the writer's own (and swallowed with it).
            await asyncio.wait({task})
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise asyncio.CancelledError
        for attempt in range(1, attempts + 1):
            try:
                written = await final()
                self.writes += 1
                return written
            except PERMANENT:
                raise
            except SparkError:
                if attempt == attempts:
                    raise
                log.warning("final write failed (attempt %d); retrying", attempt)
                await self._clock.sleep(0.2 * attempt)
        raise ValueError(f"a final write needs at least one attempt, not {attempts}")
