"""Tasks as sections over the whole local stack (two api and two tasks processes, the
Cloud Tasks emulator, Firestore and the fake model): each task's own document, its
statuses as a listener sees them, its summary and key outputs."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from google.cloud import firestore

from tests.e2e.conftest import Functions, StackUser, new_user
from tests.e2e.test_tasks import brief, finished, script_lesson, send, wait_for
from tests.fakes.openai_server import FakeOpenAI, Script

pytestmark = pytest.mark.emulator


def sections_of(db: firestore.Client, uid: str) -> Any:
    return db.collection(uid).document("client").collection("tasks")


class Statuses:
    """Every status each section of a user showed, in order, as a listener saw them."""

    def __init__(self, db: firestore.Client, uid: str) -> None:
        self.seen: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._watch = sections_of(db, uid).on_snapshot(self._on)

    def _on(self, snapshots: list[Any], changes: Any, read_time: Any) -> None:
        with self._lock:
            for snapshot in snapshots:
                status = (snapshot.to_dict() or {}).get("status")
                shown = self.seen.setdefault(snapshot.id, [])
                if status and (not shown or shown[-1] != status):
                    shown.append(status)

    def close(self) -> None:
        self._watch.unsubscribe()


def test_e2e_three_tasks_at_once_and_a_fourth_queued_each_a_section_in_order(
    functions: Functions, emulators: tuple[str, str], db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    user = new_user(emulators[1])
    listener = Statuses(db, user.uid)
    topics = [f"estuaries {n}" for n in range(4)]
    for topic in topics:
        script_lesson(
            fake_openai,
            f"section lesson: {topic}",
            topic,
            Script(
                chunks=[f"<lesson><h1>{topic}</h1><h2>Starter</h2>", "<p>Go.</p></lesson>"],
                first_delay=1,
            ),
        )
    conversations = [
        send(functions.api, user, f"section lesson: {topic}")[0].data["conversationId"]
        for topic in topics
    ]
    for c in conversations:
        wait_for(lambda c=c: finished(db, user.uid, c), "every follow-up", 60)

    def all_done() -> dict[str, Any] | None:
        # The task ends (and its section with it) once its follow-up has been written.
        statuses = [s.to_dict()["status"] for s in sections_of(db, user.uid).stream()]
        return {} if statuses == ["completed"] * 4 else None

    wait_for(all_done, "every section to complete", 30)
    listed = [
        s.to_dict()
        for s in sections_of(db, user.uid)
        .order_by("createdAt", direction=firestore.Query.DESCENDING)
        .stream()
    ]
    listener.close()
    assert len(listed) == 4
    assert [s["conversationId"] for s in listed] == conversations[::-1]  # newest first
    for section in listed:
        assert section["status"] == "completed"
        assert section["startedAt"] >= section["createdAt"]
        assert section["endedAt"] >= section["startedAt"]
        (lesson,) = section["keyOutputs"]
        assert lesson["kind"] == "lesson" and lesson["documentId"]
        assert section["summary"] == f"Created the lesson “{lesson['text']}”."
        # The conversation keeps only a small pointer to it.
        doc = (
            db.collection(user.uid)
            .document("client")
            .collection("conversations")
            .document(section["conversationId"])
            .get()
            .to_dict()
            or {}
        )
        pointer = doc["tasks"][section["id"]]
        assert set(pointer) <= {
            "status",
            "tool",
            "toolCallId",
            "displayText",
            "updatedAt",
            "error",
            "followUp",
        }
    for task_id, shown in listener.seen.items():
        assert shown[-1] == "completed", (task_id, shown)
        order = ["queued", "running", "completed"]
        assert [order.index(s) for s in shown] == sorted(order.index(s) for s in shown)
    fourth = next(s["id"] for s in listed if s["conversationId"] == conversations[3])
    assert listener.seen[fourth][0] == "queued"


def test_e2e_a_failed_task_says_what_went_wrong_and_what_to_try(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    script_lesson(
        fake_openai, "section lesson on fog", "fog", Script(status=400), follow_up="Sorry."
    )
    events = send(functions.api, alice, "section lesson on fog")
    conversation_id = events[0].data["conversationId"]
    wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up", 60)
    task_id = events[-2].data["taskId"]

    def ended() -> dict[str, Any] | None:
        found = sections_of(db, alice.uid).document(task_id).get().to_dict() or {}
        return found if found.get("status") == "failed" else None

    section = wait_for(ended, "the section to end")
    assert section["status"] == "failed"
    assert section["summary"].startswith("This did not work: Creating lesson did not work")
    assert section["keyOutputs"][0]["kind"] == "try"
    assert len(fake_openai.requests_for(brief("fog"))) == 3
