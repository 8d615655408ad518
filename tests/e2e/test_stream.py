"""POST /api/spark/agent/messages end to end: real sockets, emulators, fake model."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import (
    SseEvent,
    StackUser,
    conversation_doc,
    read_events,
    unsigned_token,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Hold, Script

pytestmark = pytest.mark.emulator

PATH = "/api/spark/agent/messages"


def headers(user: StackUser) -> dict[str, str]:
    return {"Accept": "text/event-stream", "Authorization": f"Bearer {user.token}"}


def stream(api_url: str, user: StackUser, body: dict[str, Any]) -> tuple[httpx.Response, list[Any]]:
    with httpx.stream("POST", api_url + PATH, headers=headers(user), json=body, timeout=30) as r:
        if r.status_code != 200:
            r.read()
            return r, []
        items = list(read_events(r))
    return r, items


def only_events(items: list[Any]) -> list[SseEvent]:
    return [i for i in items if isinstance(i, SseEvent)]


def test_e2e_hello_streams_and_persists_conversation(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("hello", Script(chunks=["Hello", "!", " How", " can", " I", " help?"]))
    response, items = stream(api_url, alice, {"text": "hello"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    events = only_events(items)
    assert [e.event for e in events] == ["run_start"] + ["text"] * 6 + ["done"]
    start = events[0].data
    run = start["runId"]
    lengths = [5, 6, 10, 14, 16, 22]  # the text's length after each delta
    assert [e.id for e in events] == [
        f"{run}:0:0",
        *(f"{run}:1:{n}" for n in lengths),
        f"{run}:end",
    ]
    assert set(start) == {"runId", "conversationId", "userMessageId", "assistantMessageId"}
    streamed = "".join(e.data["content"] for e in events if e.event == "text")
    assert events[-1].data == {"messageId": start["assistantMessageId"], "status": "complete"}

    doc = conversation_doc(db, alice.uid, start["conversationId"])
    assert doc is not None
    assert doc["participantIds"] == [alice.uid]
    user, assistant = doc["messages"]
    assert user["id"] == start["userMessageId"]
    assert user["author"]["userId"] == alice.uid
    assert user["content"] == [{"type": "text", "text": "hello"}]
    assert assistant["id"] == start["assistantMessageId"]
    assert assistant["status"] == "complete"
    assert assistant["content"][0]["text"] == streamed == "Hello! How can I help?"
    assert assistant["model"] == "fake-model"
    assert "activeRun" not in doc


def test_e2e_follow_up_in_same_conversation_sends_history(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("first question", Script(chunks=["First answer."]))
    fake_openai.script("second question", Script(chunks=["Second answer."]))
    _, items = stream(api_url, alice, {"text": "first question"})
    conversation_id = only_events(items)[0].data["conversationId"]
    response, _ = stream(
        api_url, alice, {"text": "second question", "conversationId": conversation_id}
    )
    assert response.status_code == 200
    sent = fake_openai.requests_for("second question")[-1]["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "first question"),
        ("assistant", "First answer."),
        ("user", "second question"),
    ]
    doc = conversation_doc(db, alice.uid, conversation_id)
    assert doc is not None and len(doc["messages"]) == 4


def test_e2e_provider_error_ends_with_error_event_and_error_message(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("break please", Script(status=500))
    _, items = stream(api_url, alice, {"text": "break please"})
    events = only_events(items)
    assert [e.event for e in events] == ["run_start", "error"]
    assert events[-1].data["code"] == "provider_unavailable"
    doc = conversation_doc(db, alice.uid, events[0].data["conversationId"])
    assert doc is not None
    user, assistant = doc["messages"]
    assert user["content"][0]["text"] == "break please"
    assert assistant["status"] == "error"
    assert assistant["error"]["message"] == events[-1].data["message"]
    assert "activeRun" not in doc


def test_e2e_provider_drops_mid_stream_keeps_partial_text(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("drop midway", Script(chunks=["Part", " one", " two"], disconnect_after=2))
    _, items = stream(api_url, alice, {"text": "drop midway"})
    events = only_events(items)
    assert [e.event for e in events] == ["run_start", "text", "text", "error"]
    doc = conversation_doc(db, alice.uid, events[0].data["conversationId"])
    assert doc is not None
    assistant = doc["messages"][1]
    assert (assistant["status"], assistant["content"][0]["text"]) == ("error", "Part one")


def test_e2e_stream_without_finish_reason_is_an_error(
    api_url: str, alice: StackUser, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("no finish", Script(chunks=["Hmm"], finish=False))
    _, items = stream(api_url, alice, {"text": "no finish"})
    assert only_events(items)[-1].data["code"] == "incomplete_response"


def test_e2e_keepalive_comment_during_silence(
    api_url: str, alice: StackUser, fake_openai: FakeOpenAI
) -> None:
    # The model is silent until the client has seen a keep-alive (1 s of silence here).
    hold = Hold(at=0)
    fake_openai.script("think first", Script(chunks=["Done thinking."], hold=hold))
    items: list[Any] = []
    try:
        with httpx.stream(
            "POST", api_url + PATH, headers=headers(alice), json={"text": "think first"}
        ) as r:
            for item in read_events(r):
                items.append(item)
                if item == ": keep-alive":
                    hold.release()
    finally:
        hold.release()
    first_text = next(
        n for n, i in enumerate(items) if isinstance(i, SseEvent) and i.event == "text"
    )
    assert ": keep-alive" in items[:first_text]


def test_e2e_second_send_while_streaming_is_409(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    hold = Hold(at=1)  # the run is live until the second send is answered
    fake_openai.script("slow one", Script(chunks=["a", "b", "c", "d"], hold=hold))
    try:
        with httpx.stream(
            "POST", api_url + PATH, headers=headers(alice), json={"text": "slow one"}
        ) as r:
            events = read_events(r)
            start = next(events)
            assert isinstance(start, SseEvent)
            conversation_id = start.data["conversationId"]
            clash = httpx.post(
                api_url + PATH,
                headers=headers(alice),
                json={"text": "me too", "conversationId": conversation_id},
            )
            hold.release()
            assert clash.status_code == 409
            assert clash.json()["error"]["code"] == "run_in_progress"
            rest = [e for e in events if isinstance(e, SseEvent)]
    finally:
        hold.release()
    assert rest[-1].event == "done"
    doc = conversation_doc(db, alice.uid, conversation_id)
    assert doc is not None
    assert [m["content"][0]["text"] for m in doc["messages"]] == ["slow one", "abcd"]


def test_e2e_client_disconnect_loses_nothing(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    chunks = [f"w{n} " for n in range(10)]
    hold = Hold(at=1)  # the rest of the reply comes only once the client has gone
    fake_openai.script("leave early", Script(chunks=chunks, hold=hold))
    try:
        with httpx.stream(
            "POST", api_url + PATH, headers=headers(alice), json={"text": "leave early"}
        ) as r:
            events = read_events(r)
            start = next(events)
            assert isinstance(start, SseEvent)
            next(events)  # first text, then hang up
    finally:
        hold.release()
    conversation_id = start.data["conversationId"]

    def finished() -> dict[str, Any] | None:
        doc = conversation_doc(db, alice.uid, conversation_id)
        return doc if doc and len(doc["messages"]) == 2 and "activeRun" not in doc else None

    doc = wait_for(finished)
    assert doc["messages"][1]["status"] == "complete"
    assert doc["messages"][1]["content"][0]["text"] == "".join(chunks)


def test_e2e_streaming_text_is_visible_in_firestore_before_the_end(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    chunks = [f"t{n} " for n in range(15)]
    # Held mid-reply: what Firestore shows then is a write made while streaming.
    hold = Hold(at=7)
    fake_openai.script("watch it grow", Script(chunks=chunks, delay=0.1, hold=hold))

    def in_flight() -> dict[str, Any] | None:
        doc = conversation_doc(db, alice.uid, conversation_id) or {}
        message = (doc.get("activeRun") or {}).get("message") or {}
        return doc if message.get("status") == "streaming" and message["content"] else None

    try:
        with httpx.stream(
            "POST", api_url + PATH, headers=headers(alice), json={"text": "watch it grow"}
        ) as r:
            items = read_events(r)
            start = next(i for i in items if isinstance(i, SseEvent))
            conversation_id = start.data["conversationId"]
            hold.wait_held()
            doc = wait_for(in_flight, what="a streaming write of the reply")
            hold.release()
            ended = [i for i in items if isinstance(i, SseEvent)]
    finally:
        hold.release()
    # The in-flight message lives in activeRun, outside the messages array.
    assert [m["role"] for m in doc["messages"]] == ["user"]
    partial = doc["activeRun"]["message"]["content"][0]["text"]
    assert partial and "".join(chunks).startswith(partial) and partial != "".join(chunks)
    assert ended[-1].event == "done"


def test_e2e_bad_requests_change_nothing(
    api_url: str, alice: StackUser, db: firestore.Client
) -> None:
    cases = [
        ({"text": ""}, 400),
        ({"text": "hi", "unknown": True}, 400),
        ({"text": "a" * 33000}, 400),
        ({"text": "hi", "conversationId": "conv_does_not_exist"}, 404),
    ]
    for body, status in cases:
        response = httpx.post(api_url + PATH, headers=headers(alice), json=body)
        assert response.status_code == status, body
        assert response.json()["error"]["code"]
    too_big = httpx.post(api_url + PATH, headers=headers(alice), content=b" " * (1024 * 1024 + 1))
    assert too_big.status_code == 413
    conversations = db.collection(alice.uid).document("client").collection("conversations")
    assert list(conversations.stream()) == []


def test_e2e_other_users_conversation_is_404(
    api_url: str, alice: StackUser, bob: StackUser, db: firestore.Client
) -> None:
    _, items = stream(api_url, alice, {"text": "hello"})
    conversation_id = only_events(items)[0].data["conversationId"]
    response = httpx.post(
        api_url + PATH,
        headers=headers(bob),
        json={"text": "let me in", "conversationId": conversation_id},
    )
    assert response.status_code == 404
    doc = conversation_doc(db, alice.uid, conversation_id)
    assert doc is not None and len(doc["messages"]) == 2


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        (None, "unauthenticated"),
        ("Bearer not-a-jwt", "unauthenticated"),
        ("Token abc", "unauthenticated"),
        ("EXPIRED", "token_expired"),
        ("OTHER_PROJECT", "unauthenticated"),
    ],
)
def test_e2e_bad_tokens_are_401(api_url: str, authorization: str | None, code: str) -> None:
    if authorization == "EXPIRED":
        authorization = "Bearer " + unsigned_token("someone", expires_in=-600)
    elif authorization == "OTHER_PROJECT":
        authorization = "Bearer " + unsigned_token("someone", project="someone-elses-project")
    sent = {"Accept": "text/event-stream"}
    if authorization:
        sent["Authorization"] = authorization
    response = httpx.post(api_url + PATH, headers=sent, json={"text": "hello"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == code
