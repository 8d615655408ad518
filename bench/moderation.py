"""What moderating a young learner's turn adds to the time to the first token (DESIGN §16).

The egress sends the model request at once and holds the reply's first event until the
moderator's verdict, so the added time should be about ``max(0, moderator - model)``:
none while the moderator is faster than the model. Measured in process through the real
``Egress.chat`` (its screen, meter and role read on in-memory fakes), with a model whose
first token comes after 50 ms and a moderator that answers after 30 ms or 300 ms; each
case is run ``RUNS`` times and its median printed (printed, never asserted).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from shared.clock import SystemClock  # noqa: E402
from shared.egress.gate import Egress  # noqa: E402
from shared.egress.moderating import ModerationPolicy  # noqa: E402
from shared.egress.provenance import InMemoryProvenanceStore  # noqa: E402
from shared.egress.screen import Screen  # noqa: E402
from shared.families.preferences import Preferences  # noqa: E402
from shared.families.service import Standing  # noqa: E402
from shared.llm.base import (  # noqa: E402
    ChatMessage,
    Finish,
    ImagePart,
    ModelEvent,
    ModelRequest,
    ProviderName,
    TextDelta,
)
from shared.llm.moderation import Verdict  # noqa: E402
from shared.store.memory import InMemorySettingsStore  # noqa: E402
from tests.unit.helpers import FreeBudget  # noqa: E402

MODEL_MS = 50
MODERATOR_MS = (30, 300)
RUNS = 20


class Model:
    """A model whose first token comes ``MODEL_MS`` after the request."""

    provider: ProviderName = "scripted"
    label = "bench-model"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        await asyncio.sleep(MODEL_MS / 1000)
        yield TextDelta("Seven times eight is fifty-six.")
        yield Finish("stop")


class Moderator:
    """A moderator that answers (clear) after ``ms``."""

    label = "bench-moderator"
    provider = "bench"

    def __init__(self, ms: int) -> None:
        self._seconds = ms / 1000

    async def judge(self, text: str, images: Sequence[ImagePart] = ()) -> Verdict:
        await asyncio.sleep(self._seconds)
        return Verdict()


class Dependent:
    """Every user a dependent without controls: each turn and reply is judged."""

    async def standing(self, user_id: str) -> Standing:
        return Standing(role="dependent")


def egress(moderator: Moderator | None) -> Egress:
    screen = Screen(InMemoryProvenanceStore(), Preferences(InMemorySettingsStore(), SystemClock()))
    return Egress(
        Model(),  # type: ignore[arg-type]
        screen,
        FreeBudget(),
        moderator=moderator,
        policy=ModerationPolicy("dependents"),
        roles=Dependent(),
    )


async def first_token_ms(gate: Egress) -> float:
    request = ModelRequest(
        system="You are Spark AI Agent.",
        messages=[ChatMessage(role="user", text="What is seven times eight?")],
    )
    began = time.perf_counter()
    stream = await gate.chat("kid", request)
    async for event in stream:
        if isinstance(event, TextDelta):
            took = (time.perf_counter() - began) * 1000
            await stream.aclose()
            return took
    raise AssertionError("no token")


async def median_ms(gate: Egress) -> float:
    return statistics.median([await first_token_ms(gate) for _ in range(RUNS)])


async def run() -> None:
    print(f"time to first token, model {MODEL_MS} ms, median of {RUNS} (moderation on: dependents)")
    base = await median_ms(egress(None))
    print(f"  no moderator:          {base:7.1f} ms")
    for ms in MODERATOR_MS:
        moderated = await median_ms(egress(Moderator(ms)))
        expected = max(0, ms - MODEL_MS)
        print(
            f"  moderator at {ms:3d} ms:   {moderated:7.1f} ms  (added {moderated - base:+6.1f} ms;"
            f" max(0, moderator - model) = {expected} ms)"
        )


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("moderation"):
        main()
