"""The opt-out as a property at the providers' wire (DESIGN §13), on the in-package fakes.

A family (Mum, Dad, Kid) sends messages; each member's agent reads them and chats;
Mum's queues lessons whose briefs quote them and has replies read aloud; the
conversation rolls over into its archive; an agent relays what it read to another
member (``send_family_message``, approved), whose agent then reads it; members opt out
and back in, in any order Hypothesis finds. The model is a parrot: whatever family
text reaches it, it repeats word for word in its reply, in the briefs of the tasks it
starts and in the messages it relays, so any leak in any door shows on its wire. It
repeats it in the ways people and models rewrite text (``DISGUISES``): in italics,
joined by punctuation, with invisible characters or look-alike letters inside words,
in HTML, as escaped JSON inside prose, its numbers regrouped.

After every step: no request the model or the speech model received during that step
carries three words in a row (or a number) of a message whose author had opted out at
that moment (every message, once the member the request was made for had): a relay
is still its first author's words. The oracle is written here on its own, from the
promise and from the parrot's own disguises (it undoes each), not from the screen's
code (nor from ``Message.quotes``: it knows who first wrote each message, not who
passed it on).
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

from shared.agent.stream.events import ApprovalRequiredEvent
from shared.agent.stream.transcript import Frame
from shared.clock import ManualClock
from shared.families.messages import Target
from shared.llm.base import Finish, ModelEvent, ModelRequest, ProviderName, TextDelta
from shared.llm.base import ToolCallRequest as Call
from shared.schemas.tasks import TASK_PAYLOAD
from shared.store.archive import roll_over_stored
from shared.tools.family.sending import MAX_SENT_CHARS
from shared.tools.quoting import READ_TOOL, SEND_TOOL
from shared.voice.scripted import ScriptedVoice
from tests.unit.helpers import Harness, run_frames
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


def _asked(request: ModelRequest) -> str:
    """What the user last said in ``request`` (the parrot's instruction)."""
    users = [t.text for t in request.messages if t.role == "user"]
    return users[-1] if users else ""


class Parrot:
    """A model that repeats every family message it can see, whole. Told "relay to
    <member>", it reads the family's messages and sends what it saw to that member."""

    provider: ClassVar[ProviderName] = "scripted"
    label = "parrot"

    def __init__(self) -> None:
        self.known: list[str] = []  # every family message sent (the parrot recognises them)
        self.requests: list[ModelRequest] = []
        self.readers: list[str] = []  # whose run each request was made for
        self.reader = "mum"  # set by the machine before it runs a member's work
        self.disguise = "plain"

    def seen(self, request: ModelRequest) -> list[str]:
        """The family messages whose words reach it in ``request``, whole."""
        plains = [" ".join(_words(s)) for s in wire_strings(request)]
        return [m for m in self.known if any(" ".join(_words(m)) in plain for plain in plains)]

    def _answer(self, request: ModelRequest) -> ModelEvent:
        disguise = DISGUISES[self.disguise]
        echo = " / ".join(disguise(m) for m in self.seen(request))  # type: ignore[operator]
        last = request.messages[-1] if request.messages else None
        asked = _asked(request)
        n = len(self.requests)
        if "writing a lesson" in request.system:
            return TextDelta(DRAFT)
        if last is not None and last.role == "user" and last.text.startswith(("read", "relay")):
            return Call(f"r{n}", READ_TOOL, "{}")
        if last is not None and last.role == "user" and last.text.startswith("lesson"):
            brief = {"topic": f"A lesson on {echo or 'rivers'}"[:200], "audience": "Year 5"}
            return Call(f"l{n}", "create_lesson", json.dumps(brief))
        if last is not None and last.name == READ_TOOL and asked.startswith("relay to ") and echo:
            sent = {"to": asked.removeprefix("relay to "), "text": echo[:MAX_SENT_CHARS]}
            return Call(f"s{n}", SEND_TOOL, json.dumps(sent))
        return TextDelta(f"I recall: {echo}" if echo else "Nothing to recall.")

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        answer = self._answer(request)
        self.requests.append(request)
        self.readers.append(self.reader)
        yield answer
        yield Finish("tool_calls" if isinstance(answer, Call) else "stop")


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
        self.sent: list[tuple[str, str]] = []  # (author, text): what each member wrote
        self.opted_out: set[str] = set()
        self.conversations: dict[str, str] = {}  # each member's agent conversation
        self.checked = (0, 0)
        self.run(self._family())

    @property
    def conversation_id(self) -> str | None:
        return self.conversations.get("mum")

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

    async def _say(self, member: str, text: str) -> list[Frame]:
        self.parrot.reader = member
        conversation_id = self.conversations.get(member)
        self.conversations[member], frames = await run_frames(
            self.harness, MEMBERS[member], text, conversation_id
        )
        return frames

    async def _deliver(self) -> None:
        """``deliver``, each task's model calls counted as its user's."""
        handler, queue, later = self.harness.handler(), self.harness.fakes.queue, []
        while tasks := queue.take():
            for task in tasks:
                if task.name.startswith(("watch-", "expire-")):
                    later.append(task)
                    continue
                payload = TASK_PAYLOAD.validate_json(task.body)
                self.parrot.reader = payload.user_id
                await handler.handle(payload)
        queue.tasks = later

    @rule(
        author=st.sampled_from(sorted(MEMBERS)),
        words=messages,
        number=st.none() | numbers,
        to=st.sampled_from(["family", *sorted(MEMBERS)]),
    )
    def family_message(
        self, author: str, words: str, number: str | None, to: str = "family"
    ) -> None:
        """To the family, or to one member only (whose agent may then relay it to one
        who never saw it)."""
        text = f"{words} {number}" if number else words
        self.parrot.known.append(text)
        self.sent.append((author, text))
        target = Target(family=True) if to in ("family", author) else Target(user_id=to)
        self.run(self.harness.agent.delivery.deliver(author, text, target))

    @rule(disguise=st.sampled_from(sorted(DISGUISES)), member=st.sampled_from(sorted(MEMBERS)))
    def read(self, disguise: str, member: str = "mum") -> None:
        self.parrot.disguise = disguise
        self.run(self._say(member, "read my family messages"))

    @rule(disguise=st.sampled_from(sorted(DISGUISES)), member=st.sampled_from(sorted(MEMBERS)))
    def chat(self, disguise: str, member: str = "mum") -> None:
        self.parrot.disguise = disguise
        self.run(self._say(member, "tell me more"))

    @rule(disguise=st.sampled_from(sorted(DISGUISES)))
    def lesson(self, disguise: str) -> None:
        self.parrot.disguise = disguise
        self.run(self._say("mum", "lesson from what the family said"))

    @rule(
        sender=st.sampled_from(sorted(MEMBERS)),
        recipient=st.sampled_from(sorted(MEMBERS)),
        disguise=st.sampled_from(sorted(DISGUISES)),
    )
    def relay(self, sender: str, recipient: str, disguise: str) -> None:
        """The sender's agent reads the family's messages and sends what it saw, in
        ``disguise``, to the recipient (the sender approves; the send runs as its task);
        the recipient's agent then reads it: others' words, under the sender's name."""
        if sender == recipient:
            return
        self.parrot.disguise = disguise

        async def relay() -> None:
            frames = await self._say(sender, f"relay to {recipient}")
            for card in [f.event for f in frames if isinstance(f.event, ApprovalRequiredEvent)]:
                await self.harness.agent.decide(
                    sender,
                    self.conversations[sender],
                    card.tool_call_id,
                    approved=True,
                    background=False,
                )
                await self._deliver()
            await self._say(recipient, "read my family messages")

        self.run(relay())

    @rule()
    def deliver_tasks(self) -> None:
        self.run(self._deliver())

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

    def _withheld_from(self, reader: str) -> set[tuple[str, ...]]:
        """The runs no request made for ``reader`` may carry now."""
        everyone = reader in self.opted_out
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
        return withheld - allowed

    @invariant()
    def nothing_withheld_reached_a_provider(self) -> None:
        withheld = {m: self._withheld_from(m) for m in MEMBERS}
        models, spoken = self.checked
        for request, reader in zip(
            self.parrot.requests[models:], self.parrot.readers[models:], strict=True
        ):
            for text in wire_strings(request):
                assert not carries(text, withheld[reader]), (reader, text)
        for text in self.voice.spoken[spoken:]:
            assert not carries(text, withheld["mum"]), text
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


@pytest.mark.parametrize("disguise", sorted(DISGUISES))
def test_each_disguise_of_a_message_relayed_before_an_opt_out_is_withheld_after_it(
    disguise: str,
) -> None:
    """The relay the property test must find, for each disguise in turn: Kid writes to
    Mum alone; Mum's agent reads it and sends it, in that disguise, to Dad; Dad's agent
    reads it (Kid's words under Mum's name: Dad's agent was never given Kid's own
    message); Kid opts out; Dad's next request (its history holds the relay) and his
    next read must not carry Kid's words."""
    machine = OptOutMachine()
    try:
        machine.family_message("kid", "bal dex fon", "7731", to="mum")
        machine.relay("mum", "dad", disguise)
        machine.nothing_withheld_reached_a_provider()
        machine.setting("kid", reads=False)
        machine.chat("plain", "dad")
        machine.read("plain", "dad")
        machine.nothing_withheld_reached_a_provider()
        # The relay happened (so the test proves something): Dad's agent read Kid's
        # words in a message from Mum.
        assert any(
            reader == "dad" and "member mum" in t and "bal" in " ".join(_words(t))
            for request, reader in zip(machine.parrot.requests, machine.parrot.readers, strict=True)
            for t in wire_strings(request)
        )
    finally:
        machine.teardown()
