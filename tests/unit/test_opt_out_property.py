"""The opt-out as a property at the providers' wire (DESIGN §13), on the in-package fakes.

A family (Mum, Dad, Kid) sends messages; Mum's agent reads them, chats, queues lessons
whose briefs quote them, has replies read aloud; the conversation rolls over into its
archive; members opt out and back in, in any order Hypothesis finds. The model is a
parrot: whatever family text reaches it, it repeats word for word in its reply and in
the briefs of the tasks it starts, so any leak in any door shows on its wire. It
repeats it in the ways people and models rewrite text (``DISGUISES``): in italics,
joined by punctuation, with invisible characters or look-alike letters inside words,
in HTML, as escaped JSON inside prose, its numbers regrouped.

After every step: no request the model or the speech model received during that step
carries three words in a row (or a number) of a message whose author had opted out at
that moment (every message, once Mum had). The oracle is written here on its own, from
the promise and from the parrot's own disguises (it undoes each), not from the
screen's code.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncGenerator
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shared.clock import ManualClock
from shared.families.messages import Target
from shared.llm.base import Finish, ModelEvent, ModelRequest, ProviderName, TextDelta
from shared.llm.base import ToolCallRequest as Call
from shared.store.archive import roll_over_stored
from shared.voice.scripted import ScriptedVoice
from tests.unit.helpers import Harness, run_frames
from tests.unit.test_admission import deliver
from tests.unit.test_family_tools import DAD, KID, MUM
from tests.unit.test_lesson_tools import DRAFT
from tests.unit.test_voice import harness as voice_harness

VOCABULARY = [f"{c}{v}{t}" for c in "bdfgkmprstvz" for v in "aeiou" for t in "lnx"][:90]
MEMBERS = {"mum": MUM, "dad": DAD, "kid": KID}
# Words, and numbers as digit sequences however they are grouped (7,731 or 77-31).
_TOKENS = re.compile(r"[a-z]+|[0-9]+(?:[^a-z0-9]+[0-9]+)*")
LOOK_ALIKES = {"a": "а", "e": "е", "o": "о", "p": "р", "x": "х", "i": "і"}  # Cyrillic
_UNLIKE = str.maketrans({v: k for k, v in LOOK_ALIKES.items()} | {"\u200d": "", "\u00ad": ""})


def _number(word: str) -> str:
    return re.sub(r"[^0-9]", "", word) if word[0].isdigit() else word


def _words(text: str) -> list[str]:
    """The oracle's reading of any text: the parrot's disguises undone, then its words."""
    text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), text)
    text = re.sub(r"\\[nrt\"\\/]", " ", text)
    text = html.unescape(re.sub(r"<[^<>]*>", " ", text))
    return [_number(w) for w in _TOKENS.findall(text.translate(_UNLIKE).lower())]


def runs_of(text: str) -> set[tuple[str, ...]]:
    """The oracle's reading of a message: its three-word runs and its numbers."""
    words = _words(text)
    found = {tuple(words[i : i + 3]) for i in range(len(words) - 2)}
    return found | {(w,) for w in words if w.isdigit() and len(w) >= 3}


def carries(text: str, withheld: set[tuple[str, ...]]) -> bool:
    words = _words(text)
    runs = {tuple(words[i : i + 3]) for i in range(len(words) - 2)} | {(w,) for w in words}
    return bool(runs & withheld)


def _grouped(number: re.Match[str]) -> str:
    digits = number.group()
    return f"{digits[:-3]},{digits[-3:]}"


DISGUISES: dict[str, object] = {
    "plain": lambda t: t,
    "italics": lambda t: f"_{t}_",
    "hyphens": lambda t: t.replace(" ", "-"),
    "dots": lambda t: t.replace(" ", "."),
    "slashes": lambda t: t.replace(" ", "/"),
    "colons": lambda t: t.replace(" ", ":"),
    "commas": lambda t: t.replace(" ", ","),
    "underscores": lambda t: t.replace(" ", "_"),
    "joiners": lambda t: re.sub(r"\b([a-z])", "\\1\u200d", t),
    "soft hyphens": lambda t: re.sub(r"([a-z])\b", "\u00ad\\1", t),
    "look-alikes": lambda t: t.translate(str.maketrans(LOOK_ALIKES)),
    "html": lambda t: "<p>" + t.replace(" ", "</em>&nbsp;<em>") + "</p>",
    "escaped json": lambda t: "they said " + json.dumps({"said": t.replace(" ", "\n")})[1:-1],
    "unicode escapes": lambda t: re.sub(r"\b([a-z])", lambda m: f"\\u{ord(m[1]):04x}", t),
    "numbers grouped": lambda t: re.sub(r"\d{4,}", _grouped, t),
    "numbers split": lambda t: re.sub(r"(\d\d)(\d\d+)", "\\1-\\2", t),
    "numbers marked": lambda t: re.sub(r"(\d{4,})", "_\\1_", t),
}


def _leaves(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    return []


def _decoded(text: str) -> list[str]:
    """``text``, and each string inside it when it is JSON (as a provider reads it)."""
    try:
        return [text, *_leaves(json.loads(text))]
    except ValueError:
        return [text]


def wire_strings(request: ModelRequest) -> list[str]:
    """Every string a provider reads in ``request``: turns, arguments, state."""
    found = [request.system]
    for turn in request.messages:
        found += _decoded(turn.text)
        for call in turn.tool_calls:
            found += _decoded(call.arguments)
        if turn.state is not None:
            found += _decoded(turn.state.data)
    return found


class Parrot:
    """A model that repeats every family message it can see, whole."""

    provider: ClassVar[ProviderName] = "scripted"
    label = "parrot"

    def __init__(self) -> None:
        self.known: list[str] = []  # every family message sent (the parrot recognises them)
        self.requests: list[ModelRequest] = []
        self.disguise = "plain"

    def seen(self, request: ModelRequest) -> list[str]:
        """The family messages whose words reach it in ``request``, whole."""
        plains = [" ".join(_words(s)) for s in wire_strings(request)]
        return [m for m in self.known if any(" ".join(_words(m)) in plain for plain in plains)]

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.requests.append(request)
        disguise = DISGUISES[self.disguise]
        echo = " / ".join(disguise(m) for m in self.seen(request))  # type: ignore[operator]
        last = request.messages[-1] if request.messages else None
        if "writing a lesson" in request.system:
            yield TextDelta(DRAFT)
        elif last is not None and last.role == "user" and last.text.startswith("read"):
            yield Call(f"r{len(self.requests)}", "read_family_messages", "{}")
        elif last is not None and last.role == "user" and last.text.startswith("lesson"):
            brief = {"topic": f"A lesson on {echo or 'rivers'}"[:200], "audience": "Year 5"}
            yield Call(f"l{len(self.requests)}", "create_lesson", json.dumps(brief))
        else:
            yield TextDelta(f"I recall: {echo}" if echo else "Nothing to recall.")
        yield Finish(
            "tool_calls"
            if last is not None
            and last.role == "user"
            and (last.text.startswith(("read", "lesson")))
            and "writing a lesson" not in request.system
            else "stop"
        )


messages = st.lists(st.sampled_from(VOCABULARY), min_size=3, max_size=7).map(" ".join)
numbers = st.integers(1000, 99999).map(str)


class OptOutMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.parrot = Parrot()
        self.voice = ScriptedVoice(self.clock, chunks=2)
        self.harness: Harness = voice_harness(self.parrot, self.clock, self.voice)  # type: ignore[arg-type]
        self.sent: list[tuple[str, str]] = []  # (author, text)
        self.opted_out: set[str] = set()
        self.conversation_id: str | None = None
        self.checked = (0, 0)
        self.run(self._family())

    def run(self, work: object) -> object:
        return self.loop.run_until_complete(work)  # type: ignore[arg-type]

    async def _family(self) -> None:
        families = self.harness.agent.families
        family = await families.create(MUM, "The Smiths")
        for user, role in ((DAD, "parent"), (KID, "dependent")):
            made = await families.invite("mum", family.id, role)  # type: ignore[arg-type]
            await families.join(user, made.token)

    def teardown(self) -> None:
        self.loop.close()

    async def _say(self, text: str) -> None:
        self.conversation_id, _ = await run_frames(self.harness, MUM, text, self.conversation_id)

    @rule(author=st.sampled_from(sorted(MEMBERS)), words=messages, number=st.none() | numbers)
    def family_message(self, author: str, words: str, number: str | None) -> None:
        text = f"{words} {number}" if number else words
        self.parrot.known.append(text)
        self.sent.append((author, text))
        self.run(self.harness.agent.delivery.deliver(author, text, Target(family=True)))

    @rule(disguise=st.sampled_from(sorted(DISGUISES)))
    def read(self, disguise: str) -> None:
        self.parrot.disguise = disguise
        self.run(self._say("read my family messages"))

    @rule(disguise=st.sampled_from(sorted(DISGUISES)))
    def chat(self, disguise: str) -> None:
        self.parrot.disguise = disguise
        self.run(self._say("tell me more"))

    @rule(disguise=st.sampled_from(sorted(DISGUISES)))
    def lesson(self, disguise: str) -> None:
        self.parrot.disguise = disguise
        self.run(self._say("lesson from what the family said"))

    @rule()
    def deliver_tasks(self) -> None:
        self.run(deliver(self.harness))

    @precondition(lambda self: self.conversation_id is not None)
    @rule()
    def roll_over(self) -> None:
        assert self.conversation_id is not None
        store = self.harness.store
        self.run(roll_over_stored(store, "mum", self.conversation_id, 1, 2, self.clock.now()))

    @precondition(lambda self: self.conversation_id is not None)
    @rule()
    def speak(self) -> None:
        async def speak() -> None:
            assert self.conversation_id is not None
            stored = await self.harness.store.get("mum", self.conversation_id)
            assert stored is not None
            replies = [m for m in stored.messages if m.role == "assistant" and m.text]
            if replies:
                spoken = await self.harness.agent.speak("mum", self.conversation_id, replies[-1].id)
                async for _ in spoken.chunks:
                    pass

        self.run(speak())

    @rule(member=st.sampled_from(sorted(MEMBERS)), reads=st.booleans())
    def setting(self, member: str, reads: bool) -> None:
        self.run(self.harness.agent.preferences.update(member, ai_reads_family_messages=reads))
        if reads:
            self.opted_out.discard(member)
        else:
            self.opted_out.add(member)

    @invariant()
    def nothing_withheld_reached_a_provider(self) -> None:
        everyone = "mum" in self.opted_out
        withheld: set[tuple[str, ...]] = set()
        allowed: set[tuple[str, ...]] = set()
        for author, text in self.sent:
            if everyone or author in self.opted_out:
                withheld |= runs_of(text)
            else:
                allowed |= runs_of(text)
        # Words a member who still allows reading wrote too are theirs to give; and the
        # figures of the time itself (the year of a message's date, say) are the
        # server's, written beside any message: a withheld "2026" is still "2026" there.
        allowed |= {(w,) for w in _TOKENS.findall(self.clock.now().isoformat())}
        withheld -= allowed
        models, spoken = self.checked
        for request in self.parrot.requests[models:]:
            for text in wire_strings(request):
                assert not carries(text, withheld), text
        for text in self.voice.spoken[spoken:]:
            assert not carries(text, withheld), text
        self.checked = (len(self.parrot.requests), len(self.voice.spoken))


OptOutMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_no_withheld_text_reaches_any_provider = OptOutMachine.TestCase


@pytest.mark.parametrize("disguise", sorted(DISGUISES))
def test_each_disguise_of_a_message_repeated_before_an_opt_out_is_withheld_after_it(
    disguise: str,
) -> None:
    """The path the property test must find, for each disguise in turn: Kid's message
    is read and repeated in that disguise, Kid opts out, and the next request (which
    carries the repeat in its history) must not carry Kid's words."""
    machine = OptOutMachine()
    try:
        machine.family_message("kid", "bal dex fon", "7731")
        machine.read(disguise)
        machine.nothing_withheld_reached_a_provider()
        machine.setting("kid", reads=False)
        machine.chat("plain")
        machine.nothing_withheld_reached_a_provider()
    finally:
        machine.teardown()
