"""The bytes of request bodies one process reads at once (an AI SDK chat's, whose 32 MiB
cost up to 3.5 times their size while they are read: ``chatbody``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from shared.errors import Busy

BUSY = (
    "Spark AI Agent is reading as many large messages as it can at once; "
    "please send yours again in a moment."
)


class ByteBudget:
    """A semaphore counted in bytes: a body holds its size while it is read and its
    files are kept, and waits (at most ``wait`` seconds) for room when others hold it.

    Waiting briefly lets a burst of uploads through one by one; past ``wait`` the body
    is refused (503 with Retry-After), unread, so that a client tries again, perhaps
    on another instance, instead of holding a connection open here."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._free = total
        self._changed = asyncio.Condition()
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def held(self, size: int, wait: float) -> AsyncIterator[None]:
        """``size`` bytes of the budget (at most all of it) while the block runs.

        Raises:
            Busy: no room within ``wait`` seconds.
        """
        size = min(size, self.total)
        async with self._changed:
            if self._free < size:
                await self._room(size, wait)
            self._free -= size
        try:
            yield
        finally:
            async with self._changed:
                self._free += size
                self._changed.notify_all()

    async def _room(self, size: int, wait: float) -> None:
        if wait <= 0:
            raise Busy(BUSY, retry_after=1)
        self.waiting += 1
        try:
            await asyncio.wait_for(self._changed.wait_for(lambda: self._free >= size), wait)
        except TimeoutError:
            raise Busy(BUSY, retry_after=round(wait)) from None
        finally:
            self.waiting -= 1
