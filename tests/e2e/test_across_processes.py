"""What once went wrong only when a second process was involved, end to end: the
stack's two ``api`` and two ``tasks`` processes behind round-robin proxies, each with
its own memory of the documents."""

from __future__ import annotations

from functools import partial
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import (
    Functions,
    StackUser,
    auth,
    conversation_path,
    settled,
    wait_for,
)
from tests.e2e.test_people import SEND, make_lesson, post_stream
from tests.e2e.test_tasks import LESSON_ARGS, brief
from tests.fakes.openai_server import FakeOpenAI, Script

pytestmark = pytest.mark.emulator


def calls(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        p["toolCall"]["id"]: p["toolCall"]
        for m in doc["messages"]
        for p in m["content"]
        if "toolCall" in p
    }


def test_e2e_a_later_task_after_one_that_finished_is_run_not_dropped(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # Issue 18, defect 1: a create_lesson task finishes (the tasks process remembers
    # the ledger it wrote), then a delete_lesson approved by the user: its task was
    # acknowledged as stale and dropped, the call queued for ever.
    topic = "volcanoes across processes"
    fake_openai.script(
        "make a volcano lesson",
        Script(
            chunks=["Creating that now."],
            tool_calls=[("create_lesson", LESSON_ARGS % topic)],
            then=Script(chunks=["Your lesson is ready."]),
        ),
    )
    fake_openai.script(brief(topic), Script(chunks=["<lesson><h1>Volcanoes</h1></lesson>"]))
    first = post_stream(functions.api + SEND, alice, {"text": "make a volcano lesson"})
    conversation_id = first[0].data["conversationId"]
    wait_for(lambda: settled(db, alice.uid, conversation_id, 4))

    lesson = make_lesson(db, alice.uid, "lesson_old_volcanoes")
    fake_openai.script(
        "delete the old volcano lesson",
        Script(
            chunks=[],
            tool_calls=[("delete_lesson", '{"lessonId": "lesson_old_volcanoes"}')],
            then=Script(chunks=["Deleted."]),
        ),
    )
    events = post_stream(
        functions.api + SEND,
        alice,
        {"text": "delete the old volcano lesson", "conversationId": conversation_id},
    )
    request = next(e for e in events if e.event == "approval_required").data
    url = functions.api + conversation_path(conversation_id, "approvals")
    decision = {"toolCallId": request["toolCallId"], "approved": True}
    response = httpx.post(url, headers=auth(alice), json=decision, timeout=30)
    assert response.status_code == 202

    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 8))
    assert calls(doc)[request["toolCallId"]]["status"] == "complete"
    assert not lesson.get().exists
    assert doc["messages"][-1]["content"][0]["text"] == "Deleted."


def test_e2e_a_users_task_tools_one_after_another_all_run(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # Each task's delivery meets whichever tasks process, with whatever it remembers.
    conversation_id = None
    for n in range(3):
        topic = f"rivers part {n}"
        ask = f"make lesson {n} on rivers"
        fake_openai.script(
            ask,
            Script(
                chunks=[],
                tool_calls=[("create_lesson", LESSON_ARGS % topic)],
                then=Script(chunks=[f"Lesson {n} is ready."]),
            ),
        )
        fake_openai.script(brief(topic), Script(chunks=[f"<lesson><h1>Rivers {n}</h1></lesson>"]))
        body: dict[str, Any] = {"text": ask}
        if conversation_id is not None:
            body["conversationId"] = conversation_id
        events = post_stream(functions.api + SEND, alice, body)
        conversation_id = events[0].data["conversationId"]
        doc = wait_for(partial(settled, db, alice.uid, conversation_id, 4 * (n + 1)))
        assert doc["messages"][-1]["content"][0]["text"] == f"Lesson {n} is ready."
    assert all(c["status"] == "complete" for c in calls(doc).values())


def test_e2e_a_reserved_conversation_id_is_not_found_on_both_paths(
    functions: Functions, alice: StackUser
) -> None:
    body = {"text": "hello", "conversationId": "__x__"}
    for sse in (True, False):
        response = httpx.post(functions.api + SEND, headers=auth(alice, sse), json=body)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
