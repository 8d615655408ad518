"""Human in the loop end to end over real sockets: questions, approvals and client tools
pause a run in Firestore; answers, decisions and client results resume it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import (
    ExtraApi,
    Functions,
    SseEvent,
    StackUser,
    auth,
    conversation_doc,
    conversation_path,
    extra_api,
    read_events,
    settled,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Script

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"
QUESTION = json.dumps(
    {
        "questions": [
            {
                "header": "Year",
                "question": "Which year group?",
                "options": [{"label": "Year 5"}, {"label": "Year 6"}],
            }
        ]
    }
)


def post_stream(url: str, user: StackUser, body: dict[str, Any]) -> list[SseEvent]:
    with httpx.stream("POST", url, headers=auth(user), json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return [e for e in read_events(r) if isinstance(e, SseEvent)]


def pending(db: firestore.Client, uid: str, conversation_id: str) -> list[dict[str, Any]]:
    """What a fresh client reading only Firestore sees waiting for the user."""
    doc = conversation_doc(db, uid, conversation_id) or {}
    answered = {
        p["toolResult"]["toolCallId"]
        for m in doc.get("messages", [])
        for p in m["content"]
        if "toolResult" in p
    }
    return [
        p["toolCall"]
        for m in doc.get("messages", [])
        if m["status"] == "waiting"
        for p in m["content"]
        if "toolCall" in p and p["toolCall"]["id"] not in answered
    ]


def text_of(events: list[SseEvent]) -> str:
    return "".join(e.data["content"] for e in events if e.event == "text")


def test_e2e_question_reload_then_answer_on_another_instance_resumes(
    functions: Functions,
    second_api: ExtraApi,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script(
        "ask me first",
        Script(
            chunks=[],
            tool_calls=[("ask_user_question", QUESTION)],
            then=Script(chunks=["A Year 6 ", "lesson it is."]),
        ),
    )
    events = post_stream(functions.api + SEND, alice, {"text": "ask me first"})
    assert [e.event for e in events] == ["run_start", "question", "done"]
    assert events[-1].data["status"] == "waiting"
    conversation_id = events[0].data["conversationId"]
    # A reload: a fresh client reads only Firestore and sees the question, exactly once.
    (call,) = pending(db, alice.uid, conversation_id)
    assert call["execution"] == "question" and call["status"] == "pending"
    assert call["id"] == events[1].data["toolCallId"]
    assert events[1].data["questions"][0]["header"] == "Year"

    answer = {"toolCallId": call["id"], "answers": {"0": "Year 6"}}
    resumed = post_stream(
        second_api.url + conversation_path(conversation_id, "answers"), alice, answer
    )
    assert text_of(resumed) == "A Year 6 lesson it is."
    assert resumed[-1].event == "done" and resumed[-1].data["status"] == "complete"
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 4))
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert doc["messages"][2]["content"][0]["toolResult"]["hidden"] is True
    assert pending(db, alice.uid, conversation_id) == []

    again = httpx.post(
        second_api.url + conversation_path(conversation_id, "answers"),
        headers=auth(alice),
        json=answer,
    )
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_answered"


def test_e2e_answer_without_a_stream_is_answered_by_a_task(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "ask in the background",
        Script(
            chunks=["Let me check. "],
            tool_calls=[("ask_user_question", QUESTION)],
            then=Script(chunks=["Year 5, noted."]),
        ),
    )
    events = post_stream(functions.api + SEND, alice, {"text": "ask in the background"})
    conversation_id = events[0].data["conversationId"]
    call_id = events[-2].data["toolCallId"]
    response = httpx.post(
        functions.api + conversation_path(conversation_id, "answers"),
        headers=auth(alice, sse=False),
        json={"toolCallId": call_id, "answers": {"0": "Year 5"}},
    )
    assert response.status_code == 202 and response.json()["status"] == "accepted"
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 4))
    assert doc["messages"][-1]["content"][0]["text"] == "Year 5, noted."


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"toolCallId": "call_nope", "answers": {"0": "Year 5"}}, 404, "not_found"),
        ({"toolCallId": "{call}", "answers": {"0": "Year 9"}}, 400, "invalid_request"),
        ({"toolCallId": "{call}", "answers": {"0": "Year 5"}, "extra": 1}, 400, "invalid_request"),
        ({"toolCallId": "{call}", "answers": {}}, 400, "invalid_request"),
    ],
)
def test_e2e_bad_answers_are_refused_and_change_nothing(
    body: dict[str, Any],
    status: int,
    code: str,
    functions: Functions,
    alice: StackUser,
    bob: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script("ask badly", Script(chunks=[], tool_calls=[("ask_user_question", QUESTION)]))
    events = post_stream(functions.api + SEND, alice, {"text": "ask badly"})
    conversation_id = events[0].data["conversationId"]
    call_id = events[1].data["toolCallId"]
    before = conversation_doc(db, alice.uid, conversation_id)
    if body["toolCallId"] == "{call}":
        body = {**body, "toolCallId": call_id}
    url = functions.api + conversation_path(conversation_id, "answers")
    response = httpx.post(url, headers=auth(alice), json=body)
    assert response.status_code == status and response.json()["error"]["code"] == code
    stranger = httpx.post(
        url, headers=auth(bob), json={"toolCallId": call_id, "answers": {"0": "Year 5"}}
    )
    assert stranger.status_code == 404
    assert conversation_doc(db, alice.uid, conversation_id) == before


def make_lesson(db: firestore.Client, uid: str, lesson_id: str) -> firestore.DocumentReference:
    ref = db.collection(uid).document("client").collection("lessons").document(lesson_id)
    ref.set(
        {
            "id": lesson_id,
            "title": "Tides",
            "body": "<lesson><h1>Tides</h1></lesson>",
            "version": 1,
            "createdAt": firestore.SERVER_TIMESTAMP,
            "updatedAt": firestore.SERVER_TIMESTAMP,
        }
    )
    return ref


@pytest.mark.parametrize("approved", [True, False])
def test_e2e_approval_runs_or_declines_the_stored_call_once(
    approved: bool,
    functions: Functions,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    lesson = make_lesson(db, alice.uid, "lesson_tides")
    trigger = f"delete tides {approved}"
    fake_openai.script(
        trigger,
        Script(
            chunks=[],
            tool_calls=[("delete_lesson", '{"lessonId": "lesson_tides"}')],
            then=Script(chunks=["Done as you said."]),
        ),
    )
    events = post_stream(functions.api + SEND, alice, {"text": trigger})
    assert [e.event for e in events] == ["run_start", "approval_required", "done"]
    request = events[1].data
    assert request["tool"] == "delete_lesson" and request["args"] == {"lessonId": "lesson_tides"}
    assert lesson.get().exists  # nothing runs before the owner decides
    conversation_id = events[0].data["conversationId"]
    decision: dict[str, Any] = {"toolCallId": request["toolCallId"], "approved": approved}
    if not approved:
        decision["reason"] = "I still need it"
    url = functions.api + conversation_path(conversation_id, "approvals")
    if approved:
        # An approved call runs on a Cloud Task (leased, retried, once); the reply follows.
        response = httpx.post(url, headers=auth(alice), json=decision)
        assert response.status_code == 202 and response.json()["status"] == "accepted"
    else:
        assert text_of(post_stream(url, alice, decision)) == "Done as you said."
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 4))
    assert doc["messages"][-1]["content"][0]["text"] == "Done as you said."
    assert lesson.get().exists is not approved
    call = doc["messages"][1]["content"][0]["toolCall"]
    assert call["status"] == ("complete" if approved else "denied")
    second = httpx.post(url, headers=auth(alice), json={**decision, "approved": not approved})
    assert second.status_code == 409


def test_e2e_client_tool_result_and_a_client_tool_timing_out(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    impatient = extra_api(functions, SPARK_CLIENT_TOOL_TIMEOUT_SECONDS="2")
    try:
        fake_openai.script(
            "explain my selection",
            Script(
                chunks=[],
                tool_calls=[("get_editor_selection", "{}")],
                then=Script(chunks=["It is about tides."]),
            ),
        )
        # Asked on an instance that waits its usual 300 s: the answer is in long before,
        # however slow the machine (the timeout is set by the instance that asked).
        events = post_stream(functions.api + SEND, alice, {"text": "explain my selection"})
        assert [e.event for e in events] == ["run_start", "tool_start", "done"]
        conversation_id = events[0].data["conversationId"]
        call_id = events[1].data["id"]
        result = {"toolCallId": call_id, "status": "ok", "output": {"text": "Tides rise."}}
        resumed = post_stream(
            impatient.url + conversation_path(conversation_id, "tool-results"), alice, result
        )
        assert text_of(resumed) == "It is about tides."

        # Nobody answers the next one: it times out with an error the model hears.
        fake_openai.script(
            "explain this one too",
            Script(
                chunks=[],
                tool_calls=[("get_editor_selection", "{}")],
                then=Script(chunks=["I could not read it."]),
            ),
        )
        events = post_stream(
            impatient.url + SEND,
            alice,
            {"text": "explain this one too", "conversationId": conversation_id},
        )
        assert events[-1].data["status"] == "waiting"
        doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 8))
        assert doc["messages"][-1]["content"][0]["text"] == "I could not read it."
        timed_out = doc["messages"][-2]["content"][0]["toolResult"]
        assert timed_out["status"] == "error"
        assert "did not answer within 2 seconds" in timed_out["outputJson"]
    finally:
        impatient.stack.stop()


@pytest.mark.parametrize("client_first", [True, False])
def test_e2e_two_pending_calls_answered_in_either_order(
    client_first: bool,
    functions: Functions,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    trigger = f"two things {client_first}"
    fake_openai.script(
        trigger,
        Script(
            chunks=[],
            tool_calls=[("ask_user_question", QUESTION), ("get_editor_selection", "{}")],
            then=Script(chunks=["Thanks for both."]),
        ),
    )
    events = post_stream(functions.api + SEND, alice, {"text": trigger})
    assert [e.event for e in events] == ["run_start", "question", "tool_start", "done"]
    conversation_id = events[0].data["conversationId"]
    answer = (
        conversation_path(conversation_id, "answers"),
        {"toolCallId": events[1].data["toolCallId"], "answers": {"0": "Year 5"}},
    )
    client = (
        conversation_path(conversation_id, "tool-results"),
        {"toolCallId": events[2].data["id"], "status": "ok", "output": "Tides rise."},
    )
    first, second = (client, answer) if client_first else (answer, client)
    recorded = httpx.post(functions.api + first[0], headers=auth(alice), json=first[1])
    assert recorded.status_code == 202 and recorded.json()["status"] == "recorded"
    resumed = post_stream(functions.api + second[0], alice, second[1])
    assert text_of(resumed) == "Thanks for both."


def test_e2e_pending_call_superseded_by_a_new_message(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "ask then drop it", Script(chunks=[], tool_calls=[("ask_user_question", QUESTION)])
    )
    fake_openai.script("something else", Script(chunks=["Sure."]))
    events = post_stream(functions.api + SEND, alice, {"text": "ask then drop it"})
    conversation_id = events[0].data["conversationId"]
    call_id = events[1].data["toolCallId"]
    later = post_stream(
        functions.api + SEND, alice, {"text": "something else", "conversationId": conversation_id}
    )
    assert text_of(later) == "Sure."
    (request,) = fake_openai.requests_for("something else")
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user"]  # every call answered
    assert "Superseded" in request["messages"][3]["content"]
    late = httpx.post(
        functions.api + conversation_path(conversation_id, "answers"),
        headers=auth(alice),
        json={"toolCallId": call_id, "answers": {"0": "Year 5"}},
    )
    assert late.status_code == 409
    assert pending(db, alice.uid, conversation_id) == []
