"""One listener per document per process, shared by everyone who follows it.

Each resume stream used to open its own Firestore listener and parse the whole
conversation on every write, a cost that grew with the streams following it; one
shared listener costs a small, fixed part of that (``bench/stream_overhead.py`` (e)
sets the two side by side). A document has one
listener however many follow it; each version is parsed at most once (when the first
follower reads it), and a follower slower than the writes only ever sees the latest
version. The listener stops when its last follower leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from shared.errors import StoreError

S = TypeVar("S")  # a snapshot as the source delivers it
T = TypeVar("T")  # a snapshot as followers read it
Key = tuple[str, str]

STOPPED = "Spark AI Agent stopped following this conversation; reconnect to carry on."


@dataclass(frozen=True, slots=True)
class Listening:
    """A source started for one document: how to stop it, and (for a source that can
    die by itself) whether it has."""

    stop: Callable[[], Awaitable[None]]
    broken: Callable[[], bool] | None = None


Listen = Callable[[Key, Callable[[S], None]], Listening]
"""Start delivering a document's versions (the current one first) to a callback that
runs on the event loop. Raises ``StoreError`` if it cannot."""


class _Unparsed:
    pass


_UNPARSED = _Unparsed()


class _Feed(Generic[S, T]):
    """The latest version of one document, and who follows it."""

    def __init__(self, parse: Callable[[S], T]) -> None:
        self._parse = parse
        self._snapshot: S | None = None
        self._parsed: T | _Unparsed = _UNPARSED
        self.version = 0
        self.followers = 0
        self.broken = False
        self.changed = asyncio.Event()
        self.listening: Listening | None = None
        self.timer: asyncio.TimerHandle | None = None

    def publish(self, snapshot: S) -> None:
        self._snapshot, self._parsed = snapshot, _UNPARSED
        self.version += 1
        self._wake()

    def fail(self) -> None:
        self.broken = True
        self._wake()

    def _wake(self) -> None:
        # A fresh event per version: a follower takes the current one before it checks
        # the version, so no wake-up is lost and none is seen twice.
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def latest(self) -> T:
        """The latest version, parsed once for every follower."""
        parsed = self._parsed
        if isinstance(parsed, _Unparsed):
            parsed = self._parsed = self._parse(self._snapshot)  # type: ignore[arg-type]
        return parsed


class Listeners(Generic[S, T]):
    """Documents this process follows, each through one ``listen`` shared by all its
    followers; ``parse`` turns a delivered snapshot into what followers read.

    A source that can die by itself (``Listening.broken``) is checked every
    ``check_seconds``: its followers then fail with ``StoreError``, and the next
    follower starts a new one.
    """

    def __init__(
        self, listen: Listen[S], parse: Callable[[S], T], check_seconds: float = 5.0
    ) -> None:
        self._listen = listen
        self._parse = parse
        self._check_seconds = check_seconds
        self._feeds: dict[Key, _Feed[S, T]] = {}

    def __len__(self) -> int:
        """How many documents are being listened to."""
        return len(self._feeds)

    async def follow(self, key: Key) -> AsyncGenerator[T, None]:
        """The document's latest version, then each newer one (intermediate versions
        are skipped when they come faster than they are read).

        Raises:
            StoreError: the source could not start, or died.
        """
        feed = self._feeds.get(key)
        if feed is None:
            feed = _Feed(self._parse)
            feed.listening = self._listen(key, feed.publish)
            self._feeds[key] = feed
            self._arm(key, feed)
        feed.followers += 1
        try:
            seen = 0
            while True:
                if feed.broken:
                    raise StoreError(STOPPED)
                if feed.version == seen:
                    await feed.changed.wait()
                    continue
                seen = feed.version
                yield feed.latest()
        finally:
            feed.followers -= 1
            if feed.followers == 0:
                await self._stop(key, feed)

    def _arm(self, key: Key, feed: _Feed[S, T]) -> None:
        if feed.listening is None or feed.listening.broken is None:
            return
        loop = asyncio.get_running_loop()
        feed.timer = loop.call_later(self._check_seconds, self._check, key, feed)

    def _check(self, key: Key, feed: _Feed[S, T]) -> None:
        assert feed.listening is not None and feed.listening.broken is not None
        if not feed.listening.broken():
            self._arm(key, feed)
            return
        if self._feeds.get(key) is feed:
            del self._feeds[key]  # the next follower starts a new listener
        feed.fail()

    async def _stop(self, key: Key, feed: _Feed[S, T]) -> None:
        if self._feeds.get(key) is feed:
            del self._feeds[key]
        if feed.timer is not None:
            feed.timer.cancel()
        if feed.listening is not None:
            await feed.listening.stop()
