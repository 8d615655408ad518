"""The prompt's prefix holds over a long conversation, through the whole stack (issue 51):
the api's adapters talk to the OpenAI and Anthropic fakes over real sockets, the fakes
model each provider's prompt cache, and what they read from it reaches Firestore."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import ExtraApi, Functions, StackUser, auth, read_events, wait_for
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.anthropic_server import last_user_text as anthropic_said
from tests.fakes.openai_server import FakeOpenAI, Script
from tests.fakes.openai_server import _last_user_text as openai_said
from tests.fakes.prompt_cache import PromptCache, Wire, extending, head

pytestmark = pytest.mark.emulator

PATH = "/api/spark/agent/messages"
TURNS = 30


@contextmanager
def caching(fake: FakeOpenAI | FakeAnthropic, wire: Wire) -> Iterator[None]:
    """``fake`` models its provider's cache for the test (the fakes are the session's)."""
    fake.cache = PromptCache(wire)
    try:
        yield
    finally:
        fake.cache = None


def converse(url: str, user: StackUser, marker: str, fake: FakeOpenAI | FakeAnthropic) -> str:
    """``TURNS`` turns in one conversation; every fifth, the model loads a skill first."""
    for n in range(4, TURNS, 5):
        args = json.dumps({"skill": "fill-blanks"})
        then = Script(chunks=["Each blank", " has one answer."])
        fake.script(f"{marker} {n}", Script(tool_calls=[("load_skill", args)], then=then))
    conversation_id = None
    for n in range(TURNS):
        body: dict[str, Any] = {"text": f"{marker} {n}"}
        if conversation_id is not None:
            body["conversationId"] = conversation_id
        with httpx.stream("POST", url + PATH, headers=auth(user), json=body, timeout=30) as r:
            assert r.status_code == 200, r.read()
            events = list(read_events(r))
        conversation_id = conversation_id or events[0].data["conversationId"]
    assert conversation_id is not None
    return conversation_id


def replies(db: firestore.Client, user: StackUser, conversation_id: str) -> list[dict[str, Any]]:
    ref = db.collection(user.uid).document("client").collection("conversations")

    def done() -> list[dict[str, Any]] | None:
        doc = ref.document(conversation_id).get().to_dict()
        if not doc or "activeRun" in doc:
            return None
        found = [m for m in doc["messages"] if m["role"] == "assistant"]
        return found if len(found) == TURNS else None

    return wait_for(done)  # type: ignore[no-any-return]


def judged(bodies: list[dict[str, Any]], wire: Wire, said: list[dict[str, Any]]) -> None:
    assert len(bodies) == TURNS + TURNS // 5
    assert all(head(b, wire) == head(bodies[0], wire) for b in bodies)
    assert extending(bodies, wire) >= 0.8
    cached = [m["usage"]["cachedInputTokens"] for m in said]
    assert cached[0] == 0 and sum(c > 0 for c in cached) >= 0.8 * TURNS


def test_e2e_openai_conversation_extends_each_request_under_one_cache_key(
    functions: Functions, fake_openai: FakeOpenAI, alice: StackUser, db: firestore.Client
) -> None:
    marker = f"cache-{secrets.token_hex(4)}"
    with caching(fake_openai, "openai"):
        conversation_id = converse(functions.api, alice, marker, fake_openai)
    ours = [b for b in fake_openai.requests if openai_said(b).startswith(marker)]
    judged(ours, "openai", replies(db, alice, conversation_id))
    keys = {b.get("prompt_cache_key") for b in ours}
    assert len(keys) == 1 and None not in keys


def test_e2e_anthropic_conversation_extends_each_request_and_marks_breakpoints(
    anthropic_api: ExtraApi, fake_anthropic: FakeAnthropic, alice: StackUser, db: firestore.Client
) -> None:
    marker = f"cache-{secrets.token_hex(4)}"
    with caching(fake_anthropic, "anthropic"):
        conversation_id = converse(anthropic_api.url, alice, marker, fake_anthropic)
    ours = [b for b in fake_anthropic.requests if anthropic_said(b).startswith(marker)]
    judged(ours, "anthropic", replies(db, alice, conversation_id))
    assert all(1 <= json.dumps(b).count('"cache_control"') <= 4 for b in ours)
