"""Task tools over the whole local stack: the api function, the Cloud Tasks emulator,
the tasks function, Firestore and the fake model, all on real sockets."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.ids import task_id_for
from shared.queue.base import SIGNATURE_HEADER, TASK_NAME_HEADER, sign
from shared.queue.naming import attempt_name
from shared.schemas.tasks import ToolTask
from tests.e2e.conftest import (
    WAIT_SECONDS,
    Functions,
    SseEvent,
    StackUser,
    conversation_doc,
    new_user,
    read_events,
)
from tests.e2e.conftest import wait_for as poll
from tests.fakes.openai_server import FakeOpenAI, Hold, Script

pytestmark = pytest.mark.emulator

LESSON_ARGS = '{"topic": "%s", "audience": "Year 4"}'


def brief(topic: str) -> str:
    """The drafting request create_lesson sends the model (its last user text)."""
    return f"Write the lesson.\n\nTopic: {topic}\nLearners: Year 4\nDuration: 45 minutes"


def script_lesson(
    fake: FakeOpenAI, ask: str, topic: str, draft: Script, follow_up: str = "Your lesson is ready."
) -> None:
    fake.script(
        ask,
        Script(
            chunks=["Creating that now."],
            tool_calls=[("create_lesson", LESSON_ARGS % topic)],
            then=Script(chunks=[follow_up]),
        ),
    )
    fake.script(brief(topic), draft)


def send(api_url: str, user: StackUser, text: str) -> list[SseEvent]:
    headers = {"Authorization": f"Bearer {user.token}", "Accept": "text/event-stream"}
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{api_url}/api/spark/agent/messages", json={"text": text}, headers=headers
        ) as response,
    ):
        assert response.status_code == 200
        return [e for e in read_events(response) if isinstance(e, SseEvent)]


def wait_for(
    check: Callable[[], dict[str, Any] | None], what: str, timeout: float = WAIT_SECONDS
) -> dict[str, Any]:
    """``check()``'s first value that is not None (``timeout``: a safety net only)."""
    (found,) = poll(lambda: (value := check()) is not None and [value], timeout, what)
    return found  # type: ignore[no-any-return]


def finished(db: firestore.Client, uid: str, conversation_id: str) -> dict[str, Any] | None:
    """The conversation once its follow-up is complete (or failed)."""
    doc = conversation_doc(db, uid, conversation_id)
    if doc is None or len(doc["messages"]) < 4:
        return None
    return doc if doc["messages"][-1]["status"] in ("complete", "error") else None


def tool_results(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["toolResult"] for m in doc["messages"] for p in m["content"] if "toolResult" in p]


def ledger(db: firestore.Client, uid: str) -> dict[str, Any]:
    return db.collection(uid).document("server").get().to_dict() or {}


def test_e2e_task_tool_queues_then_firestore_gains_result_and_follow_up(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    script_lesson(
        fake_openai,
        "plan a lesson on tides",
        "tides",
        Script(chunks=["<lesson><h1>Tides</h1>", "<p>Plan.</p></lesson>"]),
    )
    events = send(functions.api, alice, "plan a lesson on tides")

    assert [e.event for e in events][-2:] == ["task_queued", "done"]
    queued, done = events[-2].data, events[-1].data
    assert queued["tool"] == "create_lesson" and queued["displayText"] == "Creating lesson"
    assert done["status"] == "queued"
    conversation_id = events[0].data["conversationId"]

    doc = wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up")
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "tool", "assistant"]
    (result,) = tool_results(doc)
    assert result["status"] == "ok" and result["toolCallId"] == queued["toolCallId"]
    output = json.loads(result["outputJson"])
    assert (output["title"], output["version"]) == ("Tides", 1)
    assert doc["messages"][-1]["content"] == [{"type": "text", "text": "Your lesson is ready."}]
    assert doc["tasks"][queued["taskId"]]["status"] == "completed"
    call = doc["messages"][1]["content"][-1]["toolCall"]
    assert call["status"] == "complete" and call["execution"] == "task"
    lesson = (
        db.collection(alice.uid)
        .document("client")
        .collection("lessons")
        .document(output["documentId"])
    ).get()
    assert lesson.exists
    assert lesson.to_dict()["body"] == "<lesson><h1>Tides</h1><p>Plan.</p></lesson>"
    assert doc["documentId"] == output["documentId"]  # the lesson just made is open
    assert "activeRun" not in doc


def test_e2e_task_delivered_three_more_times_has_one_effect(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # The delivery Cloud Tasks makes is held in its draft while three more arrive.
    hold = Hold(at=0)
    script_lesson(
        fake_openai,
        "plan a lesson on volcanoes",
        "volcanoes",
        Script(chunks=["<lesson><h1>Volcanoes</h1></lesson>"], hold=hold),
    )
    events = send(functions.api, alice, "plan a lesson on volcanoes")
    conversation_id = events[0].data["conversationId"]
    queued = events[-2].data
    body = ToolTask(
        user_id=alice.uid,
        conversation_id=conversation_id,
        task_id=task_id_for(conversation_id, queued["toolCallId"]),
        attempt=1,
    ).to_bytes()
    key = os.environ["SPARK_TASKS_LOCAL_KEY"]
    name = attempt_name(task_id_for(conversation_id, queued["toolCallId"]), 1)

    def drafts() -> list[dict[str, Any]]:
        return fake_openai.requests_for(brief("volcanoes"))

    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(key, body, name, int(time.time())),
        TASK_NAME_HEADER: name,
    }

    def redeliver(_: int) -> int:
        return httpx.post(functions.tasks, content=body, headers=headers, timeout=30).status_code

    try:
        hold.wait_held("the first delivery's draft")
        with ThreadPoolExecutor(3) as pool:
            answers = [pool.submit(redeliver, n) for n in range(3)]
            # Each is answered, unless it slipped through: then its draft waits too.
            poll(
                lambda: all(a.done() for a in answers) or len(drafts()) > 1,
                what="the three deliveries to be answered (or one of them to draft)",
            )
            hold.release()
            statuses = [a.result() for a in answers]
    finally:
        hold.release()
    assert all(s in (200, 409) for s in statuses)

    # Every delivery has been answered: whatever they did is done.
    doc = wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up")
    assert len(tool_results(doc)) == 1
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert len(drafts()) == 1


def test_e2e_failing_tool_ends_with_error_result_and_a_plain_message(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    script_lesson(
        fake_openai,
        "plan a lesson on storms",
        "storms",
        Script(status=400),
        follow_up="Sorry, I couldn't create the lesson on storms. Please try again later.",
    )
    events = send(functions.api, alice, "plan a lesson on storms")
    conversation_id = events[0].data["conversationId"]
    doc = wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up", 60)
    (result,) = tool_results(doc)
    assert result["status"] == "error"
    assert "did not work after 3 attempts" in json.loads(result["outputJson"])["error"]
    assert doc["messages"][-1]["content"][0]["text"].startswith("Sorry, I couldn't create")
    assert [t["status"] for t in doc["tasks"].values()] == ["failed"]
    assert len(fake_openai.requests_for(brief("storms"))) == 3

    def released() -> list[str] | None:
        statuses = [t["status"] for t in ledger(db, alice.uid)["tasks"].values()]
        return statuses if statuses != ["running"] else None

    # The slot is freed once the follow-up has been written.
    assert wait_for(released, "the task's slot") == ["failed"]


def test_e2e_fourth_concurrent_task_waits_queued_until_a_slot_frees(
    functions: Functions, emulators: tuple[str, str], db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    user = new_user(emulators[1])
    topics = [f"rivers {n}" for n in range(4)]
    # The drafts are held until the four are counted: three hold their slots meanwhile.
    hold = Hold(at=0)
    for topic in topics:
        script_lesson(
            fake_openai,
            f"lesson: {topic}",
            topic,
            Script(chunks=["<lesson><h1>R</h1></lesson>"], hold=hold),
        )
    try:
        conversations = [
            send(functions.api, user, f"lesson: {topic}")[0].data["conversationId"]
            for topic in topics
        ]
        statuses = sorted(t["status"] for t in ledger(db, user.uid)["tasks"].values())
        assert statuses == ["queued", "running", "running", "running"]
        fourth = conversation_doc(db, user.uid, conversations[3]) or {}
        assert [t["status"] for t in fourth["tasks"].values()] == ["queued"]
    finally:
        hold.release()

    docs = [
        wait_for(lambda c=c: finished(db, user.uid, c), "all follow-ups", 60) for c in conversations
    ]
    assert all(tool_results(d)[0]["status"] == "ok" for d in docs)
    first_done = min(t["updatedAt"] for d in docs[:3] for t in d["tasks"].values())
    fourth_task = next(iter(docs[3]["tasks"].values()))
    assert fourth_task["updatedAt"] > first_done


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({SIGNATURE_HEADER: "0" * 64}, 401),
        ({"Authorization": "Bearer forged.oidc.token"}, 401),
    ],
)
def test_e2e_forged_calls_to_the_tasks_function_are_refused(
    functions: Functions,
    alice: StackUser,
    db: firestore.Client,
    headers: dict[str, str],
    status: int,
) -> None:
    body = ToolTask(
        user_id=alice.uid, conversation_id="conv_forged", task_id="task_forged", attempt=1
    ).to_bytes()
    response = httpx.post(
        functions.tasks,
        content=body,
        headers={"Content-Type": "application/json", **headers},
        timeout=10,
    )
    assert response.status_code == status
    assert response.json()["error"]["code"] == "unauthenticated"
    assert ledger(db, alice.uid) == {}


def test_e2e_send_without_a_stream_is_acknowledged_and_answered_by_a_task(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("reply later please", Script(chunks=["Here ", "you are."]))
    response = httpx.post(
        f"{functions.api}/api/spark/agent/messages",
        json={"text": "reply later please"},
        headers={"Authorization": f"Bearer {alice.token}"},
        timeout=10,
    )
    assert response.status_code == 202
    ack = response.json()
    assert set(ack) == {"conversationId", "messageId", "status"}
    assert ack["status"] == "accepted"

    def answered() -> dict[str, Any] | None:
        doc = conversation_doc(db, alice.uid, ack["conversationId"])
        if doc is None or doc["messages"][-1]["status"] != "complete" or "activeRun" in doc:
            return None
        return doc

    doc = wait_for(answered, "the reply")
    assert doc["messages"][0]["id"] == ack["messageId"]
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant"]
    assert doc["messages"][1]["content"] == [{"type": "text", "text": "Here you are."}]
