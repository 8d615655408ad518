"""Time, behind a small interface so tests can drive it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Where the code gets the time and waits."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; for intervals."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait this many seconds."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that moves only when a test calls ``advance``.

    ``sleep`` waits until the test has advanced the clock past the wake-up time, so
    timers run in a deterministic order without real waiting.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._elapsed = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._elapsed + seconds, next(self._order), future))
        await future

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper due on the way, in order."""
        target = self._elapsed + seconds
        await _settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            wake_at, _, future = heapq.heappop(self._sleepers)
            self._elapsed = max(self._elapsed, wake_at)
            if not future.done():
                future.set_result(None)
            await _settle()
        self._elapsed = target
        await _settle()


async def _settle() -> None:
    # Let woken tasks run until they block again; a few turns of the loop suffice
    # for the short await chains of the code under test.
    for _ in range(20):
        await asyncio.sleep(0)
