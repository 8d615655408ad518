"""Work that outlives the call that started it, held in one place per process.

A streamed run goes on when its client leaves (the reply is still saved), and the
watchdog a run asks for as it starts is enqueued while the run streams. asyncio keeps
only weak references to its tasks, so something must hold these; holding them all here
lets shutdown (and a test's end) wait for every one of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Background:
    """The process's background tasks: ``spawn`` one, ``drain`` them all."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None]:
        """Run ``work`` on its own, held here until it ends."""
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self) -> None:
        """Wait until nothing spawned here is left running, including what was spawned
        meanwhile. A task's failure is its own to report (a run saves its error)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
