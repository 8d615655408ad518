"""Streaming writes of many runs sent together, as one ``BatchWrite`` RPC."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc

from shared.store.firestore.raw import Writes, update_write


class WriteBatcher:
    """Sends the streaming writes of many runs together, as one ``BatchWrite`` RPC.

    Each write keeps its own precondition and its own outcome (``BatchWrite`` is not
    atomic), so one run's conflict never fails another's write. Writes made within
    ``window`` seconds of the first one waiting go together, up to ``limit``. A
    batched update costs the client and the database a fraction of a single one's
    (bench/stream_overhead.py (e) measures it); a write waits at most ``window`` more,
    which a reply written every 500 ms does not notice.

    The Python client has no public async ``BatchWrite`` (its ``BulkWriter`` is
    threaded and sync): the writes are sent raw (``raw.py``).
    """

    def __init__(self, writes: Writes, window: float = 0.02, limit: int = 100) -> None:
        self._writes = writes
        self._window = window
        self._limit = limit
        self._pending: list[tuple[Any, asyncio.Future[datetime]]] = []
        self._paths: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def update(
        self, ref: Any, fields: dict[str, Any], last_update_time: datetime
    ) -> datetime:
        """Apply ``fields`` to ``ref`` if it was last written at ``last_update_time``; its
        update time.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: this write failed
                (``FailedPrecondition`` when someone else wrote first).
        """
        write = update_write(ref._document_path, fields, last_update_time)
        if ref._document_path in self._paths:
            self._flush()  # one request may write a document only once
        loop = asyncio.get_running_loop()
        done: asyncio.Future[datetime] = loop.create_future()
        self._pending.append((write, done))
        self._paths.add(ref._document_path)
        if len(self._pending) >= self._limit:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._window, self._flush)
        return await done

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        self._paths = set()
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Any, asyncio.Future[datetime]]]) -> None:
        try:
            outcomes = await self._writes.batch_write([w for w, _ in batch])
        except gexc.GoogleAPICallError as exc:
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        for (_, done), outcome in zip(batch, outcomes, strict=True):
            if done.done():
                continue
            if isinstance(outcome, datetime):
                done.set_result(outcome)
            else:
                done.set_exception(outcome)
