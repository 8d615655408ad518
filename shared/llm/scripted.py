"""A scripted ``ModelProvider`` for tests: it replays steps and records requests."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from shared.clock import Clock, SystemClock
from shared.errors import ProviderError
from shared.llm.base import Finish, ModelEvent, ModelRequest, ProviderName, TextDelta


@dataclass
class Step:
    """One model call: the events to stream, with ``delay`` seconds before each,
    then ``error`` raised if set (after the events, so a stream can fail midway)."""

    events: Sequence[ModelEvent] = ()
    delay: float = 0.0
    error: ProviderError | None = None

    @classmethod
    def reply(cls, *chunks: str, delay: float = 0.0) -> Step:
        """A plain text reply streamed in ``chunks`` that finishes normally."""
        return cls([*(TextDelta(c) for c in chunks), Finish("stop")], delay=delay)


@dataclass
class ScriptedProvider:
    """Replays ``steps`` in order, one per ``stream`` call.

    A call with no step left fails the test, as does a step never used
    (``assert_exhausted``, which ``tests/conftest.py`` calls on every scripted model a
    test made, as the test ends).
    """

    provider: ClassVar[ProviderName] = "scripted"

    steps: list[Step]
    clock: Clock = field(default_factory=SystemClock)
    label: str = "scripted"
    requests: list[ModelRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Nothing here; the tests' fixture hooks in to find every scripted model made."""

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.requests.append(request)
        if not self.steps:
            raise AssertionError(f"unexpected model call #{len(self.requests)}: no step left")
        step = self.steps.pop(0)
        for event in step.events:
            if step.delay:
                await self.clock.sleep(step.delay)
            yield event
        if step.error is not None:
            raise step.error

    def assert_exhausted(self) -> None:
        if self.steps:
            raise AssertionError(f"{len(self.steps)} scripted model step(s) never used")
