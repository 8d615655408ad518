"""The moderator port (DESIGN §16): each adapter on its real SDK against our loopback fake
of its provider (real HTTP), the fakes' answers checked against the SDK's own types (the
fakes' contract), the offline stand-in's word list through the screen's folding, and the
egress's meter and bound around every verdict."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from openai.types import ModerationCreateResponse

from shared.clock import SystemClock
from shared.config import Settings
from shared.egress.gate import Bound, Egress
from shared.egress.offline_moderator import OfflineModerator, judged
from shared.egress.provenance import InMemoryProvenanceStore
from shared.egress.screen import Screen
from shared.errors import ConfigurationError, ModerationUnavailable, ProviderUnavailable
from shared.families.preferences import Preferences
from shared.llm.base import ImagePart
from shared.llm.gemini import GeminiModerator
from shared.llm.moderation import Moderator, ScriptedModerator, Verdict
from shared.llm.openai import OpenAIModerator
from shared.llm.scripted import ScriptedProvider
from shared.store.memory import InMemorySettingsStore
from shared.wiring import build_moderator
from tests.fakes.gemini_server import FakeGemini
from tests.fakes.openai_server import FakeOpenAI, Hold, ServerThread

IMAGE = ImagePart("image/jpeg", base64.b64encode(b"\xff\xd8\xff a picture \xff\xd9").decode())

# What each evasion of one phrase looks like, and the offline verdict's category.
EVASIONS = [
    ("I want to kill myself", "self_harm"),
    ("i want to k i l l m y s e l f", "self_harm"),
    ("k.i.l.l m.y.s.e.l.f", "self_harm"),
    ("k1ll mys3lf", "self_harm"),
    ("ki11 myself", "self_harm"),
    ("ＫＩＬＬ ＭＹＳＥＬＦ", "self_harm"),  # full-width
    ("kіll mуself", "self_harm"),  # Cyrillic і and у
    ("k\u200bill my\u00adself", "self_harm"),  # a zero-width space, a soft hyphen
    ("<b>kill</b> myself", "self_harm"),
    ("send n u d e s", "sexual"),
    ("$ex", "sexual"),
    ("I will k1ll you", "violence"),
    ("where can I buy w33d", "illicit"),
    ("nobody likes you", "harassment"),
    ("they are subhuman", "hate"),
]
CLEAN = [
    "Can you help me with my homework on photosynthesis?",
    "I have a new skill: juggling",
    "We went to Essex at 5 pm with 12 friends",
    "What is the method for long division?",
    "Take a stab at question 3 first",
    "a b c d e f g",
]


@pytest.mark.parametrize(("text", "category"), EVASIONS)
def test_the_offline_moderator_reads_text_as_the_screen_folds_it(text: str, category: str) -> None:
    assert judged(text).category == category


@pytest.mark.parametrize("text", CLEAN)
def test_the_offline_moderator_passes_ordinary_text(text: str) -> None:
    assert judged(text) == Verdict()


async def test_the_offline_moderator_cannot_see_images() -> None:
    assert await OfflineModerator().judge("", [IMAGE]) == Verdict()


def test_a_verdict_names_self_harm_before_anything_else() -> None:
    assert judged("you are worthless, kill yourself, I want to die").category == "self_harm"


@dataclass
class Adapter:
    name: str
    fake: Any
    connect: Callable[[], Moderator]  # a client a test, on the test's own loop


@pytest.fixture(scope="module", params=["openai", "gemini"])
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    if request.param == "openai":
        fake: Any = FakeOpenAI()
        with ServerThread(fake.app) as server:
            url = f"http://127.0.0.1:{server.port}/v1"
            yield Adapter("openai", fake, lambda: OpenAIModerator.connect("k", url, max_retries=0))
        return
    fake = FakeGemini()
    with ServerThread(fake.app) as server:
        url = f"http://127.0.0.1:{server.port}"
        yield Adapter(
            "gemini",
            fake,
            lambda: GeminiModerator.connect("gemini-2.5-flash", "k", url, max_retries=0),
        )


async def test_each_adapter_flags_what_its_provider_flags(adapter: Adapter) -> None:
    verdict = await adapter.connect().judge("I want to k1ll myself")
    # Gemini rates self-harm as dangerous content, which it cannot tell from violence.
    assert verdict.category == ("self_harm" if adapter.name == "openai" else "violence")
    assert verdict.flagged


async def test_each_adapter_passes_what_its_provider_passes(adapter: Adapter) -> None:
    assert await adapter.connect().judge("Help me with fractions, please", [IMAGE]) == Verdict()


async def test_openai_sends_text_and_images_to_omni_moderation() -> None:
    fake = FakeOpenAI()
    fake.flag_image(IMAGE.data, "sexual")
    with ServerThread(fake.app) as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        moderator = OpenAIModerator.connect("k", url, max_retries=0)
        verdict = await moderator.judge("What is in this picture?", [IMAGE])
    assert verdict.category == "sexual"
    (body,) = fake.moderations
    assert body["model"] == "omni-moderation-latest"
    assert body["input"] == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{IMAGE.data}"}},
    ]


async def test_the_fakes_moderation_answer_is_the_sdks_type() -> None:
    """The fake's contract: what it answers parses as the SDK's own response type, with
    every category the SDK knows named (a missing one would be ``None`` in the SDK)."""
    import httpx

    fake = FakeOpenAI()
    with ServerThread(fake.app) as server:
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                f"http://127.0.0.1:{server.port}/v1/moderations",
                json={"model": "omni-moderation-latest", "input": "I want to die"},
            )
    parsed = ModerationCreateResponse.model_validate(answer.json())
    (result,) = parsed.results
    assert result.flagged and result.categories.self_harm
    assert None not in result.categories.model_dump().values()
    assert None not in result.category_scores.model_dump().values()


async def test_a_failing_provider_is_our_error() -> None:
    fake = FakeOpenAI()
    fake.moderation_status = 503
    with ServerThread(fake.app) as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        moderator = OpenAIModerator.connect("k", url, max_retries=0)
        with pytest.raises(ProviderUnavailable):
            await moderator.judge("hello")
    down = OpenAIModerator.connect("k", "http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(ProviderUnavailable):
        await down.judge("hello")


@dataclass
class Ledger:
    """A budget that records each reservation and what it was settled to."""

    reserved: list[tuple[int, str]] = field(default_factory=list)
    settled: list[tuple[str, int]] = field(default_factory=list)

    def meter(self, user_id: str, task_id: str | None = None) -> Ledger:
        return self

    async def reserve(self, tokens: int, kind: str) -> str:
        self.reserved.append((tokens, kind))
        return f"r{len(self.reserved)}"

    async def settle(self, reservation: str, tokens: int) -> None:
        self.settled.append((reservation, tokens))


def egress_with(moderator: Moderator, ledger: Ledger, seconds: float = 10) -> Egress:
    screen = Screen(InMemoryProvenanceStore(), Preferences(InMemorySettingsStore(), SystemClock()))
    bound = Bound(max_chars=1000, seconds=seconds)
    return Egress(
        ScriptedProvider([]), screen, ledger, moderator=moderator, bounds={"moderation": bound}
    )


async def test_the_egress_meters_each_verdict() -> None:
    ledger = Ledger()
    egress = egress_with(OfflineModerator(), ledger)
    verdict = await egress.moderate("kid", "x" * 40, [IMAGE])
    assert verdict == Verdict()
    assert ledger.reserved == [(10 + 256, "moderation")]
    assert ledger.settled == [("r1", 266)]


async def test_a_moderator_that_hangs_is_unavailable_at_its_bound_and_still_charged() -> None:
    ledger = Ledger()
    hanging = ScriptedModerator(gate=asyncio.Event())  # never set: it never answers
    egress = egress_with(hanging, ledger, seconds=0.01)
    with pytest.raises(ModerationUnavailable):
        await egress.moderate("kid", "hello")
    assert ledger.settled == [("r1", 2)]


async def test_a_moderator_over_the_size_is_refused_before_any_call() -> None:
    from shared.errors import PayloadTooLarge

    ledger, moderator = Ledger(), ScriptedModerator()
    with pytest.raises(PayloadTooLarge):
        await egress_with(moderator, ledger).moderate("kid", "x" * 1001)
    assert moderator.calls == [] and ledger.reserved == []


async def test_a_hanging_fake_is_unavailable_through_the_egress() -> None:
    fake = FakeOpenAI()
    fake.moderation_hold = Hold()
    with ServerThread(fake.app) as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        egress = egress_with(OpenAIModerator.connect("k", url, max_retries=0), Ledger(), 0.2)
        try:
            with pytest.raises(ModerationUnavailable):
                await egress.moderate("kid", "hello")
            assert fake.moderation_hold.held.is_set()  # it was asked, and held
        finally:
            fake.moderation_hold.release()


def test_the_settings_choose_the_moderator() -> None:
    assert build_moderator(replace(Settings(), moderation="off")) is None
    assert isinstance(build_moderator(Settings()), OfflineModerator)
    keyed = Settings.from_env({"OPENAI_API_KEY": "sk-test"})
    assert isinstance(build_moderator(keyed), OpenAIModerator)
    gemini = Settings.from_env({"SPARK_MODEL": "google:gemini-2.5-flash", "GEMINI_API_KEY": "g"})
    assert isinstance(build_moderator(gemini), GeminiModerator)


@pytest.mark.parametrize(
    ("variable", "value"), [("SPARK_MODERATION", "children"), ("SPARK_MODERATION_FAIL", "shut")]
)
def test_a_misspelt_moderation_setting_refuses_to_start(variable: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        Settings.from_env({variable: value})
