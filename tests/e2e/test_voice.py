"""Voice end to end (issue 23): the real api functions (two processes behind a proxy)
on the Firestore, Auth and Storage emulators, with the real ``openai`` SDK talking to
our fake of OpenAI's session-secret and speech endpoints over HTTP."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import (
    ExtraApi,
    Functions,
    StackUser,
    auth,
    conversation_path,
    extra_api,
    read_events,
    settled,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.emulator

SESSIONS = "/api/spark/agent/voice/sessions"
SEND = "/api/spark/agent/messages"


def ledger_doc(db: firestore.Client, uid: str) -> dict[str, Any]:
    return db.collection(uid).document("server").get().to_dict() or {}


def conversations(db: firestore.Client, uid: str) -> list[str]:
    listed = db.collection(uid).document("client").collection("conversations").stream()
    return sorted(doc.id for doc in listed)


def streamed(api_url: str, user: StackUser, body: dict[str, Any]) -> str:
    """Send ``body`` as a streamed message; its conversation's id once the reply is done."""
    with httpx.stream("POST", api_url + SEND, headers=auth(user), json=body, timeout=30) as sent:
        assert sent.status_code == 200, sent.read()
        events = [e for e in read_events(sent) if not isinstance(e, str)]
    assert events[-1].event == "done", events[-1]
    return str(events[0].data["conversationId"])


def test_voice_session_is_minted_bound_to_its_user_and_refused_when_reused(
    api_url: str, db: firestore.Client, alice: StackUser, bob: StackUser, fake_openai: FakeOpenAI
) -> None:
    minted = len(fake_openai.secrets)
    answer = httpx.post(api_url + SESSIONS, headers=auth(alice, sse=False), timeout=20)
    assert answer.status_code == 201, answer.text
    assert answer.headers["cache-control"] == "no-store"
    session = answer.json()
    assert len(fake_openai.secrets) == minted + 1
    request, secret = fake_openai.secrets[-1]
    assert session["secret"] == secret and session["provider"] == "openai"
    assert session["model"] == "gpt-4o-mini-transcribe"
    assert request["session"]["type"] == "transcription"
    # Bound to Alice: her ledger keeps the secret's hash, never the secret.
    ledger = ledger_doc(db, alice.uid)
    grant = ledger["voice"][session["sessionId"]]
    assert grant["secretHash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in json.dumps(ledger, default=str)
    assert ledger["usage"]["voiceSessions"] == 1

    voice = {"input": "voice", "voiceSessionId": session["sessionId"]}
    conversation_id = streamed(api_url, alice, {"text": "Tell me about fractions", **voice})
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    assert doc["messages"][0]["input"] == "voice"
    assert doc["messages"][0]["content"][0]["text"] == "Tell me about fractions"
    assert ledger_doc(db, alice.uid)["voice"][session["sessionId"]]["conversationId"] == (
        conversation_id
    )
    # The next utterance of the session goes on in the same conversation.
    again = {"text": "And decimals?", "conversationId": conversation_id, **voice}
    assert streamed(api_url, alice, again) == conversation_id

    # Reused for another conversation: 409, nothing written. Bob cannot use it at all.
    before = conversations(db, alice.uid)
    reused = httpx.post(
        api_url + SEND, headers=auth(alice), json={"text": "New chat", **voice}, timeout=20
    )
    assert reused.status_code == 409
    assert reused.json()["error"]["code"] == "voice_session_used"
    stolen = httpx.post(
        api_url + SEND, headers=auth(bob), json={"text": "Mine", **voice}, timeout=20
    )
    assert stolen.status_code == 404
    assert stolen.json()["error"]["code"] == "voice_session_not_found"
    assert conversations(db, alice.uid) == before
    assert conversations(db, bob.uid) == []


def test_voice_sessions_past_the_daily_allowance_are_429_with_nothing_minted(
    api_url: str, db: firestore.Client, alice: StackUser, fake_openai: FakeOpenAI
) -> None:
    minted = len(fake_openai.secrets)
    for _ in range(20):  # SPARK_VOICE_SESSIONS_PER_DAY
        answer = httpx.post(api_url + SESSIONS, headers=auth(alice, sse=False), timeout=20)
        assert answer.status_code == 201, answer.text
    refused = httpx.post(api_url + SESSIONS, headers=auth(alice, sse=False), timeout=20)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["retry-after"]) >= 1
    assert len(fake_openai.secrets) == minted + 20
    ledger = ledger_doc(db, alice.uid)
    assert ledger["usage"]["voiceSessions"] == 20
    assert len(ledger["voice"]) == 20


@pytest.fixture(scope="module")
def offline_api(functions: Functions) -> Iterator[ExtraApi]:
    """An api whose provider has neither key nor base URL: the offline model, no voice
    (as where no local voice is installed: test_offline_voice.py has it)."""
    api = extra_api(functions, OPENAI_API_KEY="", OPENAI_BASE_URL="", SPARK_OFFLINE_VOICE="false")
    try:
        yield api
    finally:
        api.stack.stop()


def test_voice_is_refused_offline_with_nothing_written(
    offline_api: ExtraApi, db: firestore.Client, alice: StackUser, fake_openai: FakeOpenAI
) -> None:
    minted, spoken = len(fake_openai.secrets), len(fake_openai.speeches)
    session = httpx.post(offline_api.url + SESSIONS, headers=auth(alice, sse=False), timeout=20)
    speech = httpx.post(
        offline_api.url + conversation_path("conv_x", "speech"),
        headers=auth(alice, sse=False),
        json={"messageId": "msg_x"},
        timeout=20,
    )
    for answer in (session, speech):
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "voice_unavailable"
        assert "needs an audio provider" in answer.json()["error"]["message"]
    assert ledger_doc(db, alice.uid) == {}
    assert (len(fake_openai.secrets), len(fake_openai.speeches)) == (minted, spoken)


def test_speech_is_streamed_cached_and_the_replay_calls_no_provider(
    api_url: str, db: firestore.Client, alice: StackUser, bob: StackUser, fake_openai: FakeOpenAI
) -> None:
    conversation_id = streamed(api_url, alice, {"text": "Say something nice"})
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    user_message, reply = doc["messages"][0], doc["messages"][-1]
    assert reply["role"] == "assistant"
    url = api_url + conversation_path(conversation_id, "speech")
    spoken = len(fake_openai.speeches)

    first = httpx.post(url, headers=auth(alice, sse=False), json={"messageId": reply["id"]})
    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "audio/mpeg"
    assert first.headers["x-spark-speech"] == "made"
    assert len(fake_openai.speeches) == spoken + 1
    said = fake_openai.speeches[-1]
    assert said["input"] == "".join(p.get("text", "") for p in reply["content"]).strip()
    assert first.content.startswith(b"\xff\xfb")

    # The replay (served by either process) is the cached file: no provider call.
    for _ in range(2):
        again = httpx.post(url, headers=auth(alice, sse=False), json={"messageId": reply["id"]})
        assert again.status_code == 200
        assert again.headers["x-spark-speech"] == "cached"
        assert again.content == first.content
    assert len(fake_openai.speeches) == spoken + 1

    stranger = httpx.post(url, headers=auth(bob, sse=False), json={"messageId": reply["id"]})
    assert stranger.status_code == 404
    users = httpx.post(url, headers=auth(alice, sse=False), json={"messageId": user_message["id"]})
    assert users.status_code == 400
    assert len(fake_openai.speeches) == spoken + 1


def test_descriptions_are_stored_on_every_visual_part(
    api_url: str, db: firestore.Client, alice: StackUser, fake_openai: FakeOpenAI
) -> None:
    from tests.fakes.openai_server import Script

    fake_openai.script(
        "Which skill helps?",
        Script(
            chunks=["Let me look."],
            tool_calls=[("load_skill", json.dumps({"skill": "lesson-planning"}))],
            then=Script(chunks=["Done."]),
        ),
    )
    conversation_id = streamed(api_url, alice, {"text": "Which skill helps?"})
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    parts = [p for m in doc["messages"] for p in m["content"] if p["type"] != "text"]
    assert {p["type"] for p in parts} == {"tool_call", "tool_result"}
    for part in parts:
        assert part["description"], part
    result = next(p for p in parts if p["type"] == "tool_result")
    assert result["description"] == "Read the guide to lesson planning."
