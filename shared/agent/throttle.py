"""Throttled persistence of a streaming message (≤ 1 write per interval, plus a final one)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from shared.clock import Clock
from shared.errors import ConversationTooLarge, RunInterrupted, SparkError

log = logging.getLogger(__name__)

Write = Callable[[], Awaitable[None]]


class ThrottledWriter:
    """Calls ``write`` at most once per ``interval`` seconds while there is news.

    ``touch`` is cheap (called once per token); the write itself reads the latest
    state when it runs, so a write always carries everything streamed so far. The
    first interval counts from creation, since creating the message was a write.
    Intermediate writes that fail are logged and retried by the next one; ``finish``
    waits for a write in flight, then makes the final write, retried a few times.
    """

    def __init__(self, write: Write, interval: float, clock: Clock) -> None:
        self._write = write
        self._interval = interval
        self._clock = clock
        self._last = clock.monotonic()
        self._dirty = asyncio.Event()
        self._closing = False
        self._writing = False
        self._task: asyncio.Task[None] | None = None
        self.writes = 0
        # A write that can never succeed (the run was taken over, the document is full):
        # the caller checks it and stops instead of streaming into the void.
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
            except (RunInterrupted, ConversationTooLarge) as exc:
                self.fatal = exc
                return
            except SparkError as exc:
                log.warning("streaming write failed; the next write will carry it: %s", exc)
            except Exception:
                log.exception("streaming write failed unexpectedly; the next write will carry it")
            finally:
                self._writing = False
            if self._closing:
                return

    async def finish(self, final: Write, attempts: int = 3) -> None:
        """Stop the periodic writes and make the final one.

        Raises:
            SparkError: the final write failed ``attempts`` times.
        """
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            if not self._writing:
                task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise
        for attempt in range(1, attempts + 1):
            try:
                await final()
                self.writes += 1
                return
            except (RunInterrupted, ConversationTooLarge):
                raise  # permanent: retrying cannot help
            except SparkError:
                if attempt == attempts:
                    raise
                log.warning("final write failed (attempt %d); retrying", attempt)
                await self._clock.sleep(0.2 * attempt)
