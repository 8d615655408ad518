"""Lessons end to end over real sockets: the real api function, the fake OpenAI server and
the Firestore emulator. A teacher asks for an exercise in the lesson open in their
editor; the agent loads the skill, edits the lesson, and sums up."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.lessons.grammar import validate
from tests.e2e.conftest import (
    SseEvent,
    StackUser,
    auth,
    conversation_doc,
    conversation_path,
    read_events,
    settled,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Script

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"
ASK = "Add a fill-in-the-blank exercise about French verbs"
BODY = "<lesson>\n<h1>French verbs</h1>\n<p>Être and avoir, in the present.</p>\n</lesson>"
EXERCISE = (
    '<exercise id="ex-fv-1" type="fill-blanks">\n'
    "<h3>Complete with the present tense of être.</h3>\n"
    '<p>Nous <blank answer="sommes" hint="être" student-answer=""/> en classe.</p>\n'
    "</exercise>\n"
)


def seed_lesson(db: firestore.Client, uid: str) -> str:
    lesson_id = f"les_{secrets.token_hex(4)}"
    now = datetime.now(UTC)
    db.collection(uid).document("client").collection("lessons").document(lesson_id).set(
        {
            "id": lesson_id,
            "title": "French verbs",
            "body": BODY,
            "version": 1,
            "status": "ready",
            "createdAt": now,
            "updatedAt": now,
        }
    )
    return lesson_id


def lesson_doc(db: firestore.Client, uid: str, lesson_id: str) -> dict[str, Any]:
    ref = db.collection(uid).document("client").collection("lessons").document(lesson_id)
    snapshot = ref.get()
    assert snapshot.exists
    return snapshot.to_dict() or {}


def test_an_exercise_is_added_to_the_open_lesson_through_skill_and_edit(
    api_url: str, fake_openai: FakeOpenAI, db: firestore.Client, alice: StackUser
) -> None:
    lesson_id = seed_lesson(db, alice.uid)
    edit = {"find": "</p>\n</lesson>", "replace": "</p>\n" + EXERCISE + "</lesson>"}
    fake_openai.script(
        ASK,
        Script(
            chunks=[],
            tool_calls=[("load_skill", json.dumps({"skill": "fill-blanks"}))],
            then=Script(
                chunks=[],
                tool_calls=[("edit_document", json.dumps(edit))],
                then=Script(chunks=["I added ", "a fill-in-the-blank ", "exercise on être."]),
            ),
        ),
    )
    body = {"text": ASK, "documentId": lesson_id}
    with httpx.stream("POST", api_url + SEND, headers=auth(alice), json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        events = [e for e in read_events(r) if isinstance(e, SseEvent)]

    starts = [e.data for e in events if e.event == "tool_start"]
    assert [(s["tool"], s["displayText"]) for s in starts] == [
        ("load_skill", "Checking fill-blanks rules"),
        ("edit_document", "Editing document"),
    ]
    ends = [e.data for e in events if e.event == "tool_end"]
    assert ends[0] == {"id": starts[0]["id"], "status": "success"}
    assert ends[1] == {
        "id": starts[1]["id"],
        "status": "success",
        "documentId": lesson_id,
        "version": 2,
    }
    text = "".join(e.data["content"] for e in events if e.event == "text")
    assert text == "I added a fill-in-the-blank exercise on être."
    assert events[-1].event == "done" and events[-1].data["status"] == "complete"

    lesson = lesson_doc(db, alice.uid, lesson_id)
    assert lesson["version"] == 2
    parsed = validate(lesson["body"])
    assert "ex-fv-1" in parsed.ids
    conversation_id = events[0].data["conversationId"]
    doc = conversation_doc(db, alice.uid, conversation_id)
    assert doc is not None and doc["documentId"] == lesson_id
    reply = doc["messages"][-1]
    calls = [p["toolCall"] for p in reply["content"] if p["type"] == "tool_call"]
    assert [(c["displayText"], c["status"]) for c in calls] == [
        ("Checking fill-blanks rules", "complete"),
        ("Editing document", "complete"),
    ]
    stored = [p["toolResult"] for p in reply["content"] if p["type"] == "tool_result"]
    assert (stored[1]["documentId"], stored[1]["documentVersion"]) == (lesson_id, 2)
    # The model read the skill's rules before it edited, and saw the open lesson's id.
    second = [r for r in fake_openai.requests_for(ASK) if r["messages"][-1]["role"] == "tool"]
    assert "student-answer" in second[0]["messages"][-1]["content"]
    assert lesson_id in fake_openai.requests_for(ASK)[0]["messages"][0]["content"]


def test_another_users_lesson_is_not_found_and_nothing_is_written(
    api_url: str, db: firestore.Client, alice: StackUser, bob: StackUser
) -> None:
    lesson_id = seed_lesson(db, bob.uid)
    response = httpx.post(
        api_url + SEND,
        headers=auth(alice, sse=False),
        json={"text": "edit this", "documentId": lesson_id},
        timeout=10,
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    conversations = db.collection(alice.uid).document("client").collection("conversations")
    assert list(conversations.limit(1).stream()) == []
    assert lesson_doc(db, bob.uid, lesson_id)["version"] == 1
    bad = httpx.post(
        api_url + SEND,
        headers=auth(alice, sse=False),
        json={"text": "edit this", "documentId": "../bob/client"},
        timeout=10,
    )
    assert bad.status_code == 400


def test_a_wipe_waits_for_approval_then_the_lesson_before_it_can_be_restored(
    api_url: str, fake_openai: FakeOpenAI, db: firestore.Client, alice: StackUser
) -> None:
    """Issue 18, defect 8, on the emulator: the wipe pauses for the owner; approved, a
    Cloud Task applies it and the lesson before it is kept; the owner restores it."""
    lesson_id = seed_lesson(db, alice.uid)
    trigger = f"start the lesson again {lesson_id}"
    wipe = {"find": BODY, "replace": "<lesson>\n<p>Nothing here.</p>\n</lesson>"}
    fake_openai.script(
        trigger,
        Script(
            chunks=[],
            tool_calls=[("edit_document", json.dumps(wipe))],
            then=Script(chunks=["I started it again."]),
        ),
    )
    body = {"text": trigger, "documentId": lesson_id}
    with httpx.stream("POST", api_url + SEND, headers=auth(alice), json=body, timeout=30) as r:
        events = [e for e in read_events(r) if isinstance(e, SseEvent)]
    assert [e.event for e in events] == ["run_start", "approval_required", "done"]
    request = events[1].data
    assert request["displayText"].startswith("Removing most of “French verbs”")
    assert lesson_doc(db, alice.uid, lesson_id)["version"] == 1  # nothing yet

    conversation_id = events[0].data["conversationId"]
    decision = {"toolCallId": request["toolCallId"], "approved": True}
    approved = httpx.post(
        api_url + conversation_path(conversation_id, "approvals"),
        headers=auth(alice, sse=False),
        json=decision,
        timeout=10,
    )
    assert approved.status_code == 202
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 4))
    assert doc["messages"][-1]["content"][0]["text"] == "I started it again."
    assert "Nothing here." in lesson_doc(db, alice.uid, lesson_id)["body"]

    versions = api_url + f"/api/spark/lessons/{lesson_id}/versions"
    listed = httpx.get(versions, headers=auth(alice, sse=False), timeout=10)
    assert listed.status_code == 200
    assert (listed.json()["currentVersion"], listed.json()["versions"][0]["version"]) == (2, 1)
    restored = httpx.post(
        api_url + f"/api/spark/lessons/{lesson_id}/restore",
        headers=auth(alice, sse=False),
        json={"version": 1},
        timeout=10,
    )
    assert restored.status_code == 200 and restored.json()["version"] == 3
    lesson = lesson_doc(db, alice.uid, lesson_id)
    assert (lesson["body"], lesson["version"]) == (BODY, 3)
    kept = db.document(f"{alice.uid}/client/lessons/{lesson_id}/versions/000002").get()
    assert "Nothing here." in (kept.to_dict() or {})["body"]  # the wipe is kept in turn
