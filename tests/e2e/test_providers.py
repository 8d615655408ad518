"""The whole stack with ``SPARK_MODEL=anthropic:…``: the api function's Anthropic
adapter talks to the Anthropic fake over a real socket, and what it streams reaches
Firestore, tool round trip included."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import ExtraApi, SseEvent, StackUser, auth, read_events, wait_for
from tests.fakes.anthropic_server import FakeAnthropic, decode
from tests.fakes.openai_server import Script

pytestmark = pytest.mark.emulator

PATH = "/api/spark/agent/messages"


def stream(url: str, user: StackUser, text: str) -> list[SseEvent]:
    with httpx.stream("POST", url + PATH, headers=auth(user), json={"text": text}, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return [e for e in read_events(r) if isinstance(e, SseEvent)]


def saved(db: firestore.Client, user: StackUser, conversation_id: str) -> dict[str, Any]:
    ref = (
        db.collection(user.uid)
        .document("client")
        .collection("conversations")
        .document(conversation_id)
    )

    def done() -> dict[str, Any] | None:
        doc = ref.get().to_dict()
        return doc if doc and "activeRun" not in doc and len(doc["messages"]) >= 2 else None

    return wait_for(done)  # type: ignore[no-any-return]


def test_e2e_anthropic_reply_streams_and_reaches_firestore(
    anthropic_api: ExtraApi, fake_anthropic: FakeAnthropic, alice: StackUser, db: firestore.Client
) -> None:
    fake_anthropic.script("hello claude", Script(chunks=["Hello", " from", " Claude."]))
    events = stream(anthropic_api.url, alice, "hello claude")
    assert [e.event for e in events] == ["run_start", "text", "text", "text", "done"]
    doc = saved(db, alice, events[0].data["conversationId"])
    reply = doc["messages"][-1]
    assert reply["content"] == [{"type": "text", "text": "Hello from Claude."}]
    assert reply["model"] == "fake-model"
    assert reply["usage"] == {"inputTokens": 3, "outputTokens": 3, "cachedInputTokens": 0}
    sent = fake_anthropic.requests_for("hello claude")[-1]
    assert sent["model"] == "fake-model" and sent["stream"] is True
    assert sent["system"]  # the system prompt, at the top level where Anthropic wants it


def test_e2e_anthropic_inline_tool_round_trip_reaches_firestore(
    anthropic_api: ExtraApi, fake_anthropic: FakeAnthropic, alice: StackUser, db: firestore.Client
) -> None:
    fake_anthropic.script(
        "use a skill",
        Script(
            chunks=["Let me look."],
            tool_calls=[("load_skill", json.dumps({"skill": "fill-blanks"}))],
            thinking=True,
            then=Script(chunks=["Each blank", " has one answer."]),
        ),
    )
    events = stream(anthropic_api.url, alice, "use a skill")
    kinds = [e.event for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "done"
    assert kinds.index("tool_start") < kinds.index("tool_end")
    end = next(e for e in events if e.event == "tool_end")
    assert end.data["status"] == "success"

    doc = saved(db, alice, events[0].data["conversationId"])
    reply = doc["messages"][-1]
    assert [p["type"] for p in reply["content"]] == ["text", "tool_call", "tool_result", "text"]
    call, result = reply["content"][1]["toolCall"], reply["content"][2]["toolResult"]
    assert call["name"] == "load_skill" and result["status"] == "ok"
    assert reply["content"][3]["text"] == "Each blank has one answer."
    # The signed thinking block is kept for its step and went back unchanged with it.
    assert [(s["provider"], s["step"]) for s in reply["providerState"]] == [("anthropic", 0)]
    follow_up = fake_anthropic.requests_for("use a skill")[-1]
    assert [item[0] for item in decode(follow_up) if item[0] != "tool"][1:] == [
        "user",
        "state",
        "assistant",
        "call",
        "result",
    ]
    results = follow_up["messages"][-1]["content"]
    assert results[0]["type"] == "tool_result"
    assert results[0]["tool_use_id"] == follow_up["messages"][-2]["content"][-1]["id"]
