"""``Listeners``: one source per document, shared by its followers, parsed once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest

from shared.errors import StoreError
from shared.store.listeners import Key, Listeners, Listening


class Source:
    """A scripted source: records what was started and stopped, delivers on demand."""

    def __init__(self) -> None:
        self.started: list[Key] = []
        self.stopped: list[Key] = []
        self.deliver: dict[Key, Callable[[str], None]] = {}
        self.parsed: list[str] = []
        self.dead = False

    def listen(self, key: Key, deliver: Callable[[str], None]) -> Listening:
        self.started.append(key)
        self.deliver[key] = deliver
        deliver(f"{key[1]}@0")

        async def stop() -> None:
            self.stopped.append(key)

        return Listening(stop, lambda: self.dead)

    def parse(self, snapshot: str) -> str:
        self.parsed.append(snapshot)
        return snapshot.upper()


KEY = ("u", "c")


async def test_followers_of_one_document_share_one_source_and_each_parse() -> None:
    source = Source()
    listeners = Listeners(source.listen, source.parse)
    first, second = listeners.follow(KEY), listeners.follow(KEY)
    assert await anext(first) == "C@0" and await anext(second) == "C@0"
    source.deliver[KEY]("c@1")
    assert await anext(first) == "C@1" and await anext(second) == "C@1"
    assert source.started == [KEY] and len(listeners) == 1
    assert source.parsed == ["c@0", "c@1"]

    await first.aclose()
    assert source.stopped == []  # the other still follows
    source.deliver[KEY]("c@2")
    assert await anext(second) == "C@2"
    await second.aclose()
    assert source.stopped == [KEY] and len(listeners) == 0

    # Once all have left, a new follower starts the source afresh.
    third = listeners.follow(KEY)
    assert await anext(third) == "C@0"
    assert source.started == [KEY, KEY]
    await third.aclose()


async def test_a_slow_follower_sees_only_the_latest_version_and_nothing_is_parsed_unread() -> None:
    source = Source()
    listeners = Listeners(source.listen, source.parse)
    follower = listeners.follow(KEY)
    assert await anext(follower) == "C@0"
    for n in range(1, 50):
        source.deliver[KEY](f"c@{n}")
    assert await anext(follower) == "C@49"
    assert source.parsed == ["c@0", "c@49"]
    await follower.aclose()


async def test_a_cancelled_follower_leaves_and_the_last_one_stops_the_source() -> None:
    source = Source()
    listeners = Listeners(source.listen, source.parse)
    seen: list[str] = []

    async def follow() -> None:
        async with contextlib.aclosing(listeners.follow(KEY)) as versions:
            async for version in versions:
                seen.append(version)

    tasks = [asyncio.create_task(follow()) for _ in range(3)]
    await asyncio.sleep(0)
    source.deliver[KEY]("c@1")
    await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert sorted(seen) == ["C@0"] * 3 + ["C@1"] * 3
    assert source.stopped == [KEY] and len(listeners) == 0


async def test_a_source_that_dies_fails_its_followers_and_the_next_one_starts_anew() -> None:
    source = Source()
    listeners = Listeners(source.listen, source.parse, check_seconds=0.01)
    follower = listeners.follow(KEY)
    assert await anext(follower) == "C@0"
    source.dead = True
    with pytest.raises(StoreError):
        await asyncio.wait_for(anext(follower), 30)  # (a net: the next check finds it)
    assert source.stopped == [KEY] and len(listeners) == 0
    source.dead = False
    again = listeners.follow(KEY)
    assert await anext(again) == "C@0"
    assert source.started == [KEY, KEY]
    await again.aclose()
