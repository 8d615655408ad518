"""The opt-out as a property at the fake provider's wire, on the real stack (DESIGN §13):
Auth-emulator users, two api and two tasks processes on the Firestore and Cloud Tasks
emulators, and the OpenAI fake answering as a parrot that repeats every family message
it is given, in its replies, in the briefs of the lessons it queues and in the messages
it relays to another member (approved, sent by a task), in the unit test's disguises
(``DISGUISES``: punctuation, invisible characters, look-alike letters, HTML, escaped
JSON, regrouped numbers).

Hypothesis picks the order of family messages (to the family or to one member), each
member's reads and chat, Mum's lessons and speech, relays and opt-outs and opt-ins
(bounded: a few short runs, as each step is real HTTP). Each request the fake received
is judged, for the member and the run (``example``) it was made for, against the
settings in force when it arrived: none may carry three words in a row, or a number, of
a message then withheld (a relay is still its first author's words). A setting changes
only once the stack is quiet (no run, task or title still to come), so that no request
screened before the change arrives after it; and a run's late requests (a lesson still
drafted as the next run begins) are judged by their own run's settings, not the next's.
The same property on the in-package fakes, with many more runs:
``tests/unit/test_opt_out_property.py``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from typing import Any

import httpx
import pytest
from google.cloud import firestore
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from shared.agent.conversations.titles import title_request
from shared.audit.violations import pending
from shared.schemas.documents import Conversation
from shared.tools.family.sending import MAX_SENT_CHARS
from shared.tools.quoting import READ_TOOL, SEND_TOOL
from tests.e2e.conftest import (
    PROJECT,
    Functions,
    SseEvent,
    StackUser,
    auth,
    conversation_path,
    new_user,
    read_events,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Script
from tests.unit.test_lesson_tools import DRAFT
from tests.unit.test_opt_out_property import DISGUISES, VOCABULARY, _words, carries, runs_of
from tools.audit import read_user

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"
FAMILIES = "/api/spark/families"
SETTINGS = "/api/spark/me/settings"
MEMBERS = ["dad", "kid", "mum"]
READ, CHAT, LESSON = "read my family messages", "tell me more", "lesson from what they said"
RELAY = "relay to "  # + the recipient's userId
BRIEF = "A parroted lesson on "
WORDS = st.lists(st.sampled_from(VOCABULARY), min_size=3, max_size=6).map(" ".join)
DISGUISE = st.sampled_from(sorted(DISGUISES))


_RUNS = itertools.count(1)
# A member's tag ("(kid ex3)") and a lesson brief's ("(ex3)"): the run a request is for.
_TAG = re.compile(r" \((dad|kid|mum) (ex[0-9]+)\)$")
_EXAMPLE = re.compile(r"\((?:(?:dad|kid|mum) )?(ex[0-9]+)\)")


def said_by(text: str, member: str, example: str) -> str:
    """``text`` as ``member`` says it to their agent in run ``example``: tagged, so that
    each request the fake is sent names the member and the run it was made for (none of
    the family's words is a member's name or a run's: ``VOCABULARY`` ends each in l, n
    or x)."""
    return f"{text} ({member} {example})"


def speaker(text: str) -> str | None:
    """The member a trigger of this test's was said by (``None``: not one)."""
    tag = _TAG.search(text)
    if tag and text[: tag.start()].startswith((READ, CHAT, LESSON, RELAY)):
        return tag.group(1)
    return None


def example_of(body: dict[str, Any]) -> str | None:
    """The run a request of this test's was made in (``None``: none is named): a
    trigger's tag, or the tag the parrot writes in its replies and the texts it sends
    (which the moderator is sent too)."""
    for text in _wire_strings(body):
        found = _EXAMPLE.search(text)
        if found:
            return found.group(1)
    return None


def _moderates(body: dict[str, Any]) -> bool:
    """Whether ``body`` asks the moderator (which judges the dependent's turns, replies
    and the texts their agent sends: ``SPARK_MODERATION=dependents``)."""
    return "moderation" in str(body.get("model", ""))


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        out = [value]
        try:
            return out + _leaves(json.loads(value)) if value[:1] in "{[" else out
        except ValueError:
            return out
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    return []


def _reader(body: dict[str, Any]) -> str:
    """The member a chat request of this test's was made for: the speaker of its last
    trigger, wherever it stands in a user turn (a title's request quotes the first one
    on a line of its own; a lesson's drafter writes for Mum, who alone asks for lessons)."""
    users = [str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "user"]
    for text in reversed(users):
        for line in reversed(text.splitlines()):
            member = speaker(line.strip())
            if member is not None:
                return member
    return "mum"


class Parrot:
    """The fake's answer to every chat request: it repeats the family messages whose
    words reach it whole, in the disguise it is set to. Told to relay to a member, it
    reads the family's messages and sends what it saw to them."""

    def __init__(self, example: str) -> None:
        self.example = example
        self.known: list[str] = []
        self.disguise = "plain"
        self.lock = threading.Lock()

    def seen(self, body: dict[str, Any]) -> list[str]:
        plains = [" ".join(_words(s)) for s in _leaves(body.get("messages"))]
        with self.lock:
            known = list(self.known)
        return [m for m in known if any(" ".join(_words(m)) in p for p in plains)]

    def __call__(self, body: dict[str, Any]) -> Script | None:
        """Its answer to a request of this test's (``None``: another test's)."""
        messages = body.get("messages") or [{}]
        system = str(messages[0].get("content") or "") if messages else ""
        users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
        if not users or not (speaker(users[-1]) or BRIEF in users[-1]):
            return None
        last = messages[-1]
        disguise = DISGUISES[self.disguise]
        echo = " / ".join(disguise(m) for m in self.seen(body))  # type: ignore[operator]
        if "writing a lesson" in system:
            return Script(chunks=[DRAFT])
        text = str(last.get("content") or "") if last.get("role") == "user" else ""
        if text.startswith((READ, RELAY)):
            return Script(chunks=[], tool_calls=[("read_family_messages", "{}")])
        if text.startswith(LESSON):
            topic = f"{BRIEF}({self.example}) {echo or 'rivers'}"[:200]
            brief = {"topic": topic, "audience": "Year 5"}
            return Script(chunks=[], tool_calls=[("create_lesson", json.dumps(brief))])
        asked = users[-1]
        answered_read = last.get("role") == "tool" and len(messages) >= 2
        if answered_read and asked.startswith(RELAY) and echo and _last_call(messages) == READ_TOOL:
            to = asked.removeprefix(RELAY).rsplit(" (", 1)[0]
            sent = {"to": to, "text": f"({self.example}) {echo}"[:MAX_SENT_CHARS]}
            return Script(chunks=[], tool_calls=[(SEND_TOOL, json.dumps(sent))])
        # Tagged with the run, as the moderator sees a dependent's reply without its turn.
        said = f"I recall ({self.example}): {echo}" if echo else f"Nothing ({self.example})."
        return Script(chunks=[said])


def _last_call(messages: list[dict[str, Any]]) -> str | None:
    """The name of the tool the last assistant turn called, if it called one."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            calls = message.get("tool_calls") or []
            return str(calls[-1]["function"]["name"]) if calls else None
    return None


def _wire_strings(body: dict[str, Any]) -> list[str]:
    if "input" in body:  # a speech or a moderation request
        return _leaves(body["input"])
    return _leaves(body.get("messages"))


class StackMachine(RuleBasedStateMachine):
    functions: Functions
    fake: FakeOpenAI
    auth_host: str
    db: firestore.Client
    # Every run of the test by its name, and how much of the fake's wire is judged.
    runs: dict[str, StackMachine]
    judged: int

    def __init__(self) -> None:
        super().__init__()
        self.example = f"ex{next(_RUNS)}"
        self.runs[self.example] = self
        self.api = httpx.Client(base_url=self.functions.api, timeout=60)
        self.parrot = Parrot(self.example)
        self.users = {name: new_user(self.auth_host) for name in ("mum", "dad", "kid")}
        self.sent: list[tuple[str, str]] = []
        # When each member's setting changed (time.monotonic() once it was answered).
        self.changes: list[tuple[float, str, bool]] = []
        self.conversations: dict[str, str] = {}  # each member's agent conversation
        self.replies: list[str] = []  # Mum's replies (to be read aloud)
        self._family()

    def _as(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.users[name].token}"}

    def _family(self) -> None:
        made = self.api.post(FAMILIES, headers=self._as("mum"), json={"name": "Smiths"})
        assert made.status_code == 201, made.text
        family_id = made.json()["family"]["id"]
        for name, role in (("dad", "parent"), ("kid", "dependent")):
            link = self.api.post(
                f"{FAMILIES}/{family_id}/invites", headers=self._as("mum"), json={"role": role}
            )
            joined = self.api.post(
                f"{FAMILIES}/join", headers=self._as(name), json={"token": link.json()["token"]}
            )
            assert joined.status_code == 200, joined.text

    def teardown(self) -> None:
        self.api.close()

    def _say(self, member: str, text: str) -> list[SseEvent]:
        user: StackUser = self.users[member]
        body: dict[str, Any] = {"text": said_by(text, member, self.example)}
        if member in self.conversations:
            body["conversationId"] = self.conversations[member]
        deadline = time.monotonic() + 45
        while True:
            with httpx.stream(
                "POST", self.functions.api + SEND, headers=auth(user), json=body, timeout=60
            ) as response:
                # A lesson's follow-up may still be replying: a client waits, then sends.
                if response.status_code == 409 and time.monotonic() < deadline:
                    response.read()
                    time.sleep(0.5)
                    continue
                assert response.status_code == 200, response.read()
                events = [e for e in read_events(response) if not isinstance(e, str)]
                break
        self.conversations.setdefault(member, events[0].data["conversationId"])
        done = [e for e in events if e.event == "done"]
        if member == "mum" and done and done[-1].data.get("status") == "complete":
            self.replies.append(done[-1].data["messageId"])
        return events

    @initialize(texts=st.lists(WORDS, min_size=3, max_size=3))
    def everyone_writes(self, texts: list[str]) -> None:
        """Each member has written once before anything else happens, so that every
        run has words to read, quote and withhold."""
        for author, words in zip(("mum", "dad", "kid"), texts, strict=True):
            self.family_message(author, words, "family")

    @rule(
        author=st.sampled_from(MEMBERS),
        words=WORDS,
        to=st.sampled_from(["family", *MEMBERS]),
    )
    def family_message(self, author: str, words: str, to: str) -> None:
        """To the family, or to one member only (whose agent may relay it on)."""
        with self.parrot.lock:
            self.parrot.known.append(words)
        target: dict[str, Any] = (
            {"targetFamily": True}
            if to in ("family", author)
            else {"targetUserId": self.users[to].uid}
        )
        sent = self.api.post(SEND, headers=self._as(author), json={"text": words, **target})
        assert sent.status_code == 201, sent.text
        self.sent.append((author, words))

    @rule(member=st.sampled_from(MEMBERS), disguise=DISGUISE)
    def read(self, member: str, disguise: str) -> None:
        self.parrot.disguise = disguise
        self._say(member, READ)

    @rule(member=st.sampled_from(MEMBERS), disguise=DISGUISE)
    def chat(self, member: str, disguise: str) -> None:
        self.parrot.disguise = disguise
        self._say(member, CHAT)

    @rule(disguise=DISGUISE)
    def lesson(self, disguise: str) -> None:
        self.parrot.disguise = disguise
        self._say("mum", LESSON)

    @rule(
        sender=st.sampled_from(MEMBERS),
        recipient=st.sampled_from(MEMBERS),
        disguise=DISGUISE,
    )
    def relay(self, sender: str, recipient: str, disguise: str) -> None:
        """The sender's agent reads the family's messages and sends what it saw, in
        ``disguise``, to the recipient; the sender approves and a task sends it; then
        the recipient's agent reads it: others' words under the sender's name."""
        if sender == recipient:
            return
        self.parrot.disguise = disguise
        events = self._say(sender, RELAY + self.users[recipient].uid)
        cards = [e.data for e in events if e.event == "approval_required"]
        for card in cards:
            url = conversation_path(self.conversations[sender], "approvals")
            decision = {"toolCallId": card["toolCallId"], "approved": True}
            answer = self.api.post(url, headers=self._as(sender), json=decision)
            assert answer.status_code == 202, answer.text
            # The send is a task's, and so is the reply to its result: the model is
            # asked with the result once the message is delivered.
            wait_for(lambda call=card["toolCallId"]: self._answered(call), what="the relay sent")
        self._say(recipient, READ)

    def _answered(self, call_id: str) -> bool:
        """Whether the model has been asked with the result of call ``call_id``."""
        return any(
            m.get("tool_call_id") == call_id
            for body in list(self.fake.requests)
            for m in body.get("messages") or []
        )

    @precondition(lambda self: bool(self.replies))
    @rule()
    def speak(self) -> None:
        url = f"/api/spark/agent/conversations/{self.conversations['mum']}/speech"
        self.api.post(url, headers=self._as("mum"), json={"messageId": self.replies[-1]})

    def quiet(self) -> bool:
        """Whether nothing of this run's is still to reach the provider: no run active,
        no task queued or running, and every conversation with a reply titled (a title
        is asked for after the reply's ``done``, in the background)."""
        for user in self.users.values():
            documents = read_user(self.db, user.uid)
            if pending(documents):
                return False
            for raw in documents.conversations.values():
                if raw.get("kind") != "agent" or raw.get("title") is not None:
                    continue
                if title_request(Conversation.model_validate(raw), "") is not None:
                    return False
        return True

    @rule(member=st.sampled_from(["mum", "dad", "kid"]), reads=st.booleans())
    def setting(self, member: str, reads: bool) -> None:
        # A request screened before the change may arrive after it: none is in flight.
        wait_for(self.quiet, what="the stack quiet before a setting changes")
        changed = self.api.patch(
            SETTINGS, headers=self._as(member), json={"aiReadsFamilyMessages": reads}
        )
        assert changed.status_code == 200, changed.text
        self.changes.append((time.monotonic(), member, reads))

    def _withheld_at(self, moment: float, reader: str) -> set[tuple[str, ...]]:
        """What no request made for ``reader`` at ``moment`` may carry."""
        out: set[str] = set()
        for at, member, reads in self.changes:
            if at <= moment:
                (out.discard if reads else out.add)(member)
        withheld: set[tuple[str, ...]] = set()
        allowed: set[tuple[str, ...]] = set()
        for author, text in self.sent:
            if reader in out or author in out:
                withheld |= runs_of(text)
            else:
                allowed |= runs_of(text)
        # Words a member who still allows reading wrote too are theirs to give.
        return withheld - allowed

    @invariant()
    def nothing_withheld_reached_the_provider(self) -> None:
        judge(self)


def judge(current: StackMachine) -> None:
    """Judge each request the fake has received since the last judgement by the run it
    was made in (one that names none, a speech request say, is ``current``'s)."""
    wire = current.fake.wire
    for at, body in wire[StackMachine.judged :]:
        run = StackMachine.runs.get(example_of(body) or "", current)
        # The moderator judges the kid's (the one dependent); speech is Mum's (she alone
        # has replies read aloud).
        reader = "kid" if _moderates(body) else "mum" if "input" in body else _reader(body)
        withheld = run._withheld_at(at, reader)
        for text in _wire_strings(body):
            assert not carries(text, withheld), text
    StackMachine.judged = len(wire)


def _answer(body: dict[str, Any]) -> Script | None:
    """The fake's answer: the parrot of the run the request was made in."""
    run = StackMachine.runs.get(example_of(body) or "")
    return run.parrot(body) if run else None


def test_e2e_no_withheld_text_reaches_the_provider_on_two_processes(
    functions: Functions, fake_openai: FakeOpenAI, emulators: tuple[str, str]
) -> None:
    StackMachine.functions = functions
    StackMachine.fake = fake_openai
    StackMachine.auth_host = emulators[1]
    StackMachine.db = firestore.Client(project=PROJECT)
    StackMachine.runs = {}
    StackMachine.judged = len(fake_openai.wire)
    # The shared profile (no deadline: a verdict never depends on the machine's speed),
    # bounded by its runs and their steps, each a real HTTP exchange.
    bounded = settings(
        settings.get_profile("any-machine"),
        max_examples=4,
        stateful_step_count=10,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    # The parrots stay on after the test: the lessons they queued may still be drafted
    # while the audit waits for them (they answer this test's requests only).
    fake_openai.answer = _answer
    run_state_machine_as_test(StackMachine, settings=bounded)
    # What the last run left going still reaches the provider: judged once all is quiet.
    for run in StackMachine.runs.values():
        wait_for(run.quiet, what=f"run {run.example} quiet")
    judge(next(reversed(StackMachine.runs.values())))
