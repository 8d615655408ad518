"""The opt-out as a property at the fake provider's wire, on the real stack (DESIGN §13):
Auth-emulator users, two api and two tasks processes on the Firestore and Cloud Tasks
emulators, and the OpenAI fake answering as a parrot that repeats every family message
it is given, in its replies and in the briefs of the lessons it queues.

Hypothesis picks the order of family messages, reads, chat, lessons, speech and
opt-outs and opt-ins (bounded: a few short runs, as each step is real HTTP). Each
request the fake received is judged against the settings in force when it arrived:
none may carry three words in a row, or a number, of a message then withheld.
The same property on the in-package fakes, with many more runs:
``tests/unit/test_opt_out_property.py``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
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

from tests.e2e.conftest import Functions, StackUser, auth, new_user, read_events
from tests.fakes.openai_server import FakeOpenAI, Script
from tests.unit.test_lesson_tools import DRAFT
from tests.unit.test_opt_out_property import _TOKENS, VOCABULARY, carries, runs_of

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"
FAMILIES = "/api/spark/families"
SETTINGS = "/api/spark/me/settings"
READ, CHAT, LESSON = "read my family messages", "tell me more", "lesson from what they said"
TRIGGERS = {READ, CHAT, LESSON}
BRIEF = "A parroted lesson on "
WORDS = st.lists(st.sampled_from(VOCABULARY), min_size=3, max_size=6).map(" ".join)


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


class Parrot:
    """The fake's answer to every chat request: it repeats the family messages whose
    words reach it whole."""

    def __init__(self) -> None:
        self.known: list[str] = []
        self.lock = threading.Lock()

    def seen(self, body: dict[str, Any]) -> list[str]:
        plains = [" ".join(_TOKENS.findall(s.lower())) for s in _leaves(body.get("messages"))]
        with self.lock:
            known = list(self.known)
        return [m for m in known if any(" ".join(_TOKENS.findall(m)) in p for p in plains)]

    def __call__(self, body: dict[str, Any]) -> Script | None:
        """Its answer to a request of this test's (``None``: another test's)."""
        messages = body.get("messages") or [{}]
        system = str(messages[0].get("content") or "") if messages else ""
        users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
        if not users or not any(u in TRIGGERS or BRIEF in u for u in users[-1:]):
            return None
        last = messages[-1]
        echo = " / ".join(self.seen(body))
        if "writing a lesson" in system:
            return Script(chunks=[DRAFT])
        text = str(last.get("content") or "") if last.get("role") == "user" else ""
        if text.startswith("read"):
            return Script(chunks=[], tool_calls=[("read_family_messages", "{}")])
        if text.startswith("lesson"):
            brief = {"topic": f"{BRIEF}{echo or 'rivers'}"[:200], "audience": "Year 5"}
            return Script(chunks=[], tool_calls=[("create_lesson", json.dumps(brief))])
        return Script(chunks=[f"I recall: {echo}" if echo else "Nothing to recall."])


def _wire_strings(body: dict[str, Any]) -> list[str]:
    if "input" in body:  # a speech request
        return [str(body["input"])]
    return _leaves(body.get("messages"))


class StackMachine(RuleBasedStateMachine):
    functions: Functions
    fake: FakeOpenAI
    auth_host: str

    def __init__(self) -> None:
        super().__init__()
        self.api = httpx.Client(base_url=self.functions.api, timeout=60)
        self.parrot = Parrot()
        self.fake.answer = self.parrot
        self.users = {name: new_user(self.auth_host) for name in ("mum", "dad", "kid")}
        self.sent: list[tuple[str, str]] = []
        # When each member's setting changed (time.monotonic() once it was answered).
        self.changes: list[tuple[float, str, bool]] = []
        self.conversation_id: str | None = None
        self.replies: list[str] = []
        self.checked = len(self.fake.wire)
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

    def _say(self, text: str) -> None:
        user: StackUser = self.users["mum"]
        body: dict[str, Any] = {"text": text}
        if self.conversation_id is not None:
            body["conversationId"] = self.conversation_id
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
                events = list(read_events(response))
                break
        first = next(e for e in events if not isinstance(e, str))
        self.conversation_id = self.conversation_id or first.data["conversationId"]
        done = [e for e in events if not isinstance(e, str) and e.event == "done"]
        if done and done[-1].data.get("status") == "complete":
            self.replies.append(done[-1].data["messageId"])

    @initialize(texts=st.lists(WORDS, min_size=3, max_size=3))
    def everyone_writes(self, texts: list[str]) -> None:
        """Each member has written once before anything else happens, so that every
        run has words to read, quote and withhold."""
        for author, words in zip(("mum", "dad", "kid"), texts, strict=True):
            self.family_message(author, words)

    @rule(author=st.sampled_from(["mum", "dad", "kid"]), words=WORDS)
    def family_message(self, author: str, words: str) -> None:
        with self.parrot.lock:
            self.parrot.known.append(words)
        sent = self.api.post(
            SEND, headers=self._as(author), json={"text": words, "targetFamily": True}
        )
        assert sent.status_code == 201, sent.text
        self.sent.append((author, words))

    @rule()
    def read(self) -> None:
        self._say(READ)

    @rule()
    def chat(self) -> None:
        self._say(CHAT)

    @rule()
    def lesson(self) -> None:
        self._say(LESSON)

    @precondition(lambda self: bool(self.replies))
    @rule()
    def speak(self) -> None:
        url = f"/api/spark/agent/conversations/{self.conversation_id}/speech"
        self.api.post(url, headers=self._as("mum"), json={"messageId": self.replies[-1]})

    @rule(member=st.sampled_from(["mum", "dad", "kid"]), reads=st.booleans())
    def setting(self, member: str, reads: bool) -> None:
        changed = self.api.patch(
            SETTINGS, headers=self._as(member), json={"aiReadsFamilyMessages": reads}
        )
        assert changed.status_code == 200, changed.text
        self.changes.append((time.monotonic(), member, reads))

    def _withheld_at(self, moment: float) -> set[tuple[str, ...]]:
        out: set[str] = set()
        for at, member, reads in self.changes:
            if at <= moment:
                (out.discard if reads else out.add)(member)
        withheld: set[tuple[str, ...]] = set()
        allowed: set[tuple[str, ...]] = set()
        for author, text in self.sent:
            if "mum" in out or author in out:
                withheld |= runs_of(text)
            else:
                allowed |= runs_of(text)
        # Words a member who still allows reading wrote too are theirs to give.
        return withheld - allowed

    @invariant()
    def nothing_withheld_reached_the_provider(self) -> None:
        for at, body in self.fake.wire[self.checked :]:
            withheld = self._withheld_at(at)
            for text in _wire_strings(body):
                assert not carries(text, withheld), text
        self.checked = len(self.fake.wire)


def test_e2e_no_withheld_text_reaches_the_provider_on_two_processes(
    functions: Functions, fake_openai: FakeOpenAI, emulators: tuple[str, str]
) -> None:
    StackMachine.functions = functions
    StackMachine.fake = fake_openai
    StackMachine.auth_host = emulators[1]
    bounded = settings(
        max_examples=4,
        stateful_step_count=10,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    # The parrot stays on after the test: the lessons it queued are still being
    # drafted while the audit waits for them (it answers this test's requests only).
    run_state_machine_as_test(StackMachine, settings=bounded)
