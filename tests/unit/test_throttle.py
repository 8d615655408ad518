from __future__ import annotations

import asyncio

import pytest

from shared.clock import ManualClock, SystemClock
from shared.errors import StoreError
from shared.throttle import ThrottledWriter


class Recorder:
    """A write target that records (time, text) of each write."""

    def __init__(self, clock: ManualClock, text: list[str]) -> None:
        self.clock, self.text = clock, text
        self.writes: list[tuple[float, str]] = []

    async def write(self) -> None:
        self.writes.append((self.clock.monotonic(), "".join(self.text)))


async def test_throttle_writes_once_per_interval_for_a_known_token_schedule() -> None:
    clock = ManualClock()
    text: list[str] = []
    sink = Recorder(clock, text)
    writer = ThrottledWriter(sink.write, 0.5, clock)
    # 20 tokens, one every 100 ms, from t=0.1 s to t=2.0 s.
    for n in range(20):
        await clock.advance(0.1)
        text.append(f"t{n} ")
        writer.touch()
    await writer.finish(sink.write)

    times = [round(t, 3) for t, _ in sink.writes]
    assert times == [0.5, 1.0, 1.5, 2.0, 2.0]  # four throttled writes + the final one
    assert writer.writes == 5
    # Each throttled write carries every token streamed before it.
    assert sink.writes[0][1] == "".join(f"t{n} " for n in range(4))
    assert sink.writes[-1][1] == "".join(f"t{n} " for n in range(20))


async def test_throttle_trailing_write_lands_after_a_burst_then_silence() -> None:
    clock = ManualClock()
    text: list[str] = []
    sink = Recorder(clock, text)
    writer = ThrottledWriter(sink.write, 0.5, clock)
    for n in range(3):
        await clock.advance(0.01)
        text.append(str(n))
        writer.touch()
    await clock.advance(5)
    assert [(round(t, 3), s) for t, s in sink.writes] == [(0.5, "012")]
    await writer.finish(sink.write)
    assert len(sink.writes) == 2


async def test_throttle_without_tokens_makes_only_the_final_write() -> None:
    clock = ManualClock()
    sink = Recorder(clock, [])
    writer = ThrottledWriter(sink.write, 0.5, clock)
    await clock.advance(3)
    await writer.finish(sink.write)
    assert len(sink.writes) == 1


async def test_throttle_survives_a_failed_intermediate_write() -> None:
    clock = ManualClock()
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StoreError("unavailable")

    writer = ThrottledWriter(flaky, 0.5, clock)
    writer.touch()
    await clock.advance(0.6)
    writer.touch()
    await clock.advance(0.6)
    assert calls == 2
    await writer.finish(flaky)
    assert calls == 3


async def test_throttle_final_write_retries_then_raises() -> None:
    clock = ManualClock()

    async def broken() -> None:
        raise StoreError("down")

    writer = ThrottledWriter(broken, 0.5, clock)
    task = asyncio.create_task(writer.finish(broken))
    for _ in range(5):
        await clock.advance(1)
    with pytest.raises(StoreError):
        await task


async def test_a_cancelled_caller_of_finish_is_not_swallowed() -> None:
    started = asyncio.Event()

    async def slow_write() -> None:
        started.set()
        await asyncio.sleep(10)

    writer = ThrottledWriter(slow_write, 0, SystemClock())
    writer.touch()
    await started.wait()  # a periodic write is in flight
    finishing = asyncio.create_task(writer.finish(slow_write))
    await asyncio.sleep(0.01)
    finishing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finishing
