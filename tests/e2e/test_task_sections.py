"""Tasks as sections over the whole local stack (two api and two tasks processes, the
Cloud Tasks emulator, Firestore and the fake model): each task's own document, its
statuses as a listener sees them, its summary and key outputs."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.queue.base import SIGNATURE_HEADER, TASK_NAME_HEADER, sign
from shared.queue.naming import attempt_name
from shared.schemas.tasks import ToolTask
from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e.conftest import (
    Functions,
    SseEvent,
    StackUser,
    conversation_doc,
    extra_api,
    new_user,
    read_events,
    upload,
)
from tests.e2e.test_review import FEEDBACK
from tests.e2e.test_tasks import brief, finished, ledger, script_lesson, send, wait_for
from tests.fakes.openai_server import FakeOpenAI, Hold, Script
from tests.samples import pdf_with_pages

pytestmark = pytest.mark.emulator


LESSON_STEPS = ["Drafting the lesson", "Checking the draft", "Saving the lesson"]
REVIEW_STEPS = ["Reading the work", "Reviewing the work", "Checking the feedback"]


def sections_of(db: firestore.Client, uid: str) -> Any:
    return db.collection(uid).document("client").collection("tasks")


class Statuses:
    """Every status each section of a user showed, in order, as a listener saw them."""

    def __init__(self, db: firestore.Client, uid: str) -> None:
        self.seen: dict[str, list[str]] = {}
        self._lock = threading.Condition()
        self._watch = sections_of(db, uid).on_snapshot(self._on)

    def _on(self, snapshots: list[Any], changes: Any, read_time: Any) -> None:
        with self._lock:
            for snapshot in snapshots:
                status = (snapshot.to_dict() or {}).get("status")
                shown = self.seen.setdefault(snapshot.id, [])
                if status and (not shown or shown[-1] != status):
                    shown.append(status)
            self._lock.notify_all()

    def shown(self, now: dict[str, str]) -> None:
        """Wait until each section in ``now`` shows its status (60 s: a safety net)."""
        with self._lock:
            if not self._lock.wait_for(
                lambda: all(self.seen.get(t, [""])[-1] == s for t, s in now.items()), 60
            ):
                raise AssertionError(f"gave up after 60 s waiting for the listener to see {now}")

    def close(self, *, after: dict[str, str]) -> None:
        """Stop listening once each section in `after` has shown its status: a read of
        the document can see a status before the listener's snapshot brings it."""
        self.shown(after)
        self._watch.unsubscribe()


def test_e2e_three_tasks_at_once_and_a_fourth_queued_each_a_section_in_order(
    functions: Functions, emulators: tuple[str, str], db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    user = new_user(emulators[1])
    listener = Statuses(db, user.uid)
    topics = [f"estuaries {n}" for n in range(4)]
    # The drafts are held until the listener has seen the fourth wait: three hold slots.
    hold = Hold(at=0)
    for topic in topics:
        script_lesson(
            fake_openai,
            f"section lesson: {topic}",
            topic,
            Script(
                chunks=[f"<lesson><h1>{topic}</h1><h2>Starter</h2>", "<p>Go.</p></lesson>"],
                hold=hold,
            ),
        )
    try:
        sent = [send(functions.api, user, f"section lesson: {topic}") for topic in topics]
        listener.shown({sent[3][-2].data["taskId"]: "queued"})
    finally:
        hold.release()
    conversations = [events[0].data["conversationId"] for events in sent]
    for c in conversations:
        wait_for(lambda c=c: finished(db, user.uid, c), "every follow-up", 60)

    def all_done() -> dict[str, Any] | None:
        # The task ends (and its section with it) once its follow-up has been written.
        statuses = [s.to_dict()["status"] for s in sections_of(db, user.uid).stream()]
        return {} if statuses == ["completed"] * 4 else None

    wait_for(all_done, "every section to complete")
    listed = [
        s.to_dict()
        for s in sections_of(db, user.uid)
        .order_by("createdAt", direction=firestore.Query.DESCENDING)
        .stream()
    ]
    listener.close(after={s["id"]: "completed" for s in listed})
    assert len(listed) == 4
    assert [s["conversationId"] for s in listed] == conversations[::-1]  # newest first
    for section in listed:
        assert section["status"] == "completed"
        assert section["startedAt"] >= section["createdAt"]
        assert section["endedAt"] >= section["startedAt"]
        (lesson,) = section["keyOutputs"]
        assert lesson["kind"] == "lesson" and lesson["documentId"]
        assert section["summary"] == f"Created the lesson “{lesson['text']}”."
        # Its progress steps, each appended as the tool reported it (issue 37).
        assert [u["text"] for u in section["updates"]] == LESSON_STEPS
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

    section = section_when(db, alice.uid, task_id, "failed")
    assert section["status"] == "failed"
    assert section["summary"].startswith("This did not work: Creating lesson did not work")
    assert section["keyOutputs"][0]["kind"] == "try"
    assert len(fake_openai.requests_for(brief("fog"))) == 3


def cancel(api_url: str, user: StackUser, task_id: str) -> httpx.Response:
    return httpx.post(
        f"{api_url}/api/spark/agent/tasks/{task_id}/cancel",
        headers={"Authorization": f"Bearer {user.token}"},
        timeout=30,
    )


def section_of(db: firestore.Client, uid: str, task_id: str) -> dict[str, Any]:
    return sections_of(db, uid).document(task_id).get().to_dict() or {}


def section_when(
    db: firestore.Client, uid: str, task_id: str, status: str, timeout: float = 30
) -> dict[str, Any]:
    """The section once it shows ``status``. A task ends (its section with it) only once
    its follow-up is written, so a finished conversation does not yet mean an ended
    section: read at once, it can still say ``running``."""

    def shown() -> dict[str, Any] | None:
        found = section_of(db, uid, task_id)
        return found if found.get("status") == status else None

    return wait_for(shown, f"the section to show {status}", timeout)


def test_e2e_cancel_a_running_task_at_its_next_step_and_a_queued_one_at_once(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # The plan is slow to come: the cancel lands while the tool runs, in another api
    # process than the tasks process running it; the tool stops at its next step.
    args = {"topic": "rivers", "audience": "Year 4", "count": 2}
    fake_openai.script(
        "plan two river lessons",
        Script(
            chunks=["Planning them now."],
            tool_calls=[("plan_lessons", json.dumps(args))],
            then=Script(chunks=["Stopped, as you asked."]),
        ),
    )
    plan = {
        "lessons": [{"title": "Sources", "focus": "Where"}, {"title": "Mouths", "focus": "End"}]
    }
    # The plan comes only once the cancel has been answered.
    hold = Hold(at=0)
    fake_openai.script(
        "Plan a sequence of 2 lessons.", Script(chunks=[json.dumps(plan)], hold=hold)
    )
    drafted = len(fake_openai.requests_for("Write the lesson."))  # by other tests
    listener = Statuses(db, alice.uid)
    events = send(functions.api, alice, "plan two river lessons")
    conversation_id = events[0].data["conversationId"]
    task_id = events[-2].data["taskId"]
    wait_for(
        lambda: (
            section_of(db, alice.uid, task_id)
            if fake_openai.requests_for("Plan a sequence of 2 lessons.")
            else None
        ),
        "the plan to be asked for",
    )
    try:
        answer = cancel(functions.api, alice, task_id)
    finally:
        hold.release()
    assert answer.status_code == 202, answer.text
    assert answer.json() == {
        "taskId": task_id,
        "conversationId": conversation_id,
        "status": "cancelling",
    }

    section = section_when(db, alice.uid, task_id, "cancelled")
    assert section["summary"] == "Cancelled by the user."
    doc = wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up")
    results = [p["toolResult"] for m in doc["messages"] for p in m["content"] if "toolResult" in p]
    assert [(r["status"], json.loads(r["outputJson"])) for r in results] == [
        ("error", {"error": "Cancelled by the user."})
    ]
    assert doc["messages"][-1]["content"] == [{"type": "text", "text": "Stopped, as you asked."}]
    assert doc["tasks"][task_id]["status"] == "cancelled"
    # It stopped at "Creating lesson 1 of 2": no lesson was drafted.
    assert len(fake_openai.requests_for("Write the lesson.")) == drafted
    record = ledger(db, alice.uid)["tasks"][task_id]
    assert record["status"] == "cancelled"
    assert cancel(functions.api, alice, task_id).status_code == 409
    listener.close(after={task_id: "cancelled"})
    assert listener.seen[task_id][-2:] == ["running", "cancelled"]


def test_e2e_cancel_a_queued_task_at_once(
    functions: Functions, emulators: tuple[str, str], db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    user = new_user(emulators[1])
    topics = [f"deltas {n}" for n in range(4)]
    hold = Hold(at=0)  # the three hold their slots until the fourth is cancelled
    for topic in topics:
        script_lesson(
            fake_openai,
            f"queued lesson: {topic}",
            topic,
            Script(chunks=[f"<lesson><h1>{topic}</h1><p>Go.</p></lesson>"], hold=hold),
        )
    try:
        sent = [send(functions.api, user, f"queued lesson: {topic}") for topic in topics]
        fourth = sent[3][-2].data["taskId"]
        assert ledger(db, user.uid)["tasks"][fourth]["status"] == "queued"
        answer = cancel(functions.api, user, fourth)
        assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
        assert section_of(db, user.uid, fourth)["status"] == "cancelled"
    finally:
        hold.release()
    for events in sent:
        conversation_id = events[0].data["conversationId"]
        wait_for(lambda c=conversation_id: finished(db, user.uid, c), "every follow-up", 60)
    assert not fake_openai.requests_for(brief("deltas 3"))


def test_e2e_a_task_asks_its_user_and_completes_in_the_same_section(
    functions: Functions,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
    bucket: CloudStorageFileStore,
) -> None:
    ask = "Please review my homework sheet"
    path = f"{alice.uid}/uploads/sheet.pdf"
    pdf = upload(bucket, path, pdf_with_pages("Task 1: leaves", "Task 2: roots"), "application/pdf")
    args = {"file": path, "brief": "The homework sheet."}
    fake_openai.script(
        ask,
        Script(
            chunks=["I will review it."],
            tool_calls=[("review_work", json.dumps(args))],
            then=Script(chunks=["Here is your feedback on task 2."]),
        ),
    )
    question = {"question": "Which task does this answer?", "options": ["Task 1", "Task 2"]}
    fake_openai.script(
        "Review this piece of work.", Script(chunks=[json.dumps({"question": question})])
    )
    listener = Statuses(db, alice.uid)
    with httpx.stream(
        "POST",
        f"{functions.api}/api/spark/agent/messages",
        headers={"Authorization": f"Bearer {alice.token}", "Accept": "text/event-stream"},
        json={"text": ask, "attachments": [pdf]},
        timeout=30,
    ) as r:
        events = [e for e in read_events(r) if isinstance(e, SseEvent)]
    conversation_id = events[0].data["conversationId"]
    task_id = events[-2].data["taskId"]

    section = section_when(db, alice.uid, task_id, "waiting_on_user")
    assert section["question"] == "Which task does this answer?"
    assert ledger(db, alice.uid)["tasks"][task_id]["status"] == "waiting_on_user"
    doc = conversation_doc(db, alice.uid, conversation_id) or {}
    call = doc["messages"][-1]["content"][0]["toolCall"]
    assert (call["name"], call["status"], call["forCall"]) == (
        "ask_user_question",
        "pending",
        events[-2].data["toolCallId"],
    )
    # The second review, with the answer, gives the feedback.
    fake_openai.script("Review this piece of work.", Script(chunks=[json.dumps(FEEDBACK)]))
    answered = httpx.post(
        f"{functions.api}/api/spark/agent/conversations/{conversation_id}/answers",
        headers={"Authorization": f"Bearer {alice.token}"},
        json={"toolCallId": call["id"], "answers": {"0": "Task 2"}},
        timeout=30,
    )
    assert answered.status_code == 202, answered.text

    section = section_when(db, alice.uid, task_id, "completed", 60)
    listener.close(after={task_id: "completed"})
    assert section["summary"] == FEEDBACK["summary"]
    kinds = [o["kind"] for o in section["keyOutputs"]]
    assert kinds == ["strength", "correction"]  # no mark was asked for
    assert listener.seen[task_id][-4:] == ["running", "waiting_on_user", "running", "completed"]
    # Its progress steps: the first review's (the one that asked), then those of the
    # review with the answer (its next attempt), numbered on from them, every one kept.
    steps = [(u["attempt"], u["step"], u["text"]) for u in section["updates"]]
    assert steps == [
        *((1, n, text) for n, text in enumerate(REVIEW_STEPS, 1)),
        *((2, n, text) for n, text in enumerate(REVIEW_STEPS, 4)),
    ]
    doc = wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up")
    assert doc["messages"][-1]["content"] == [
        {"type": "text", "text": "Here is your feedback on task 2."}
    ]
    second = fake_openai.requests_for("Review this piece of work.")[-1]
    assert "they answered: Task 2." in json.dumps(second)


class Updates:
    """Every version of one section's progress steps a listener saw, in order."""

    def __init__(self, db: firestore.Client, uid: str, task_id: str) -> None:
        self.seen: list[list[tuple[int, int, int, str]]] = []
        self._lock = threading.Condition()
        self._watch = sections_of(db, uid).document(task_id).on_snapshot(self._on)

    def _on(self, snapshots: list[Any], changes: Any, read_time: Any) -> None:
        with self._lock:
            for snapshot in snapshots:
                updates = (snapshot.to_dict() or {}).get("updates") or []
                self.seen.append([(u["seq"], u["attempt"], u["step"], u["text"]) for u in updates])

    def close(self) -> None:
        self._watch.unsubscribe()


PLAN = {
    "lessons": [
        {"title": "Sources", "focus": "Where rivers begin"},
        {"title": "Bends", "focus": "Meanders and oxbow lakes"},
        {"title": "Mouths", "focus": "Where rivers end"},
    ]
}


def planned_brief(topic: str, index: int) -> str:
    """The drafting request plan_lessons sends for lesson ``index`` of ``PLAN``."""
    titles = [lesson["title"] for lesson in PLAN["lessons"]]
    others = "; ".join(f"{i + 1}. {t}" for i, t in enumerate(titles))
    lesson = PLAN["lessons"][index]
    return (
        f"Write the lesson.\n\nTopic: {topic}\nLearners: Year 4\nDuration: 45 minutes\n"
        f"Lesson {index + 1} of 3 in the sequence: {others}\n"
        f"This lesson: {lesson['title']}: {lesson['focus']}"
    )


def redeliver(
    functions: Functions, uid: str, conversation_id: str, task_id: str, attempt: int
) -> int:
    """Deliver attempt ``attempt`` of the task again, as Cloud Tasks may at any time."""
    body = ToolTask(
        user_id=uid, conversation_id=conversation_id, task_id=task_id, attempt=attempt
    ).to_bytes()
    name = attempt_name(task_id, attempt)
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(os.environ["SPARK_TASKS_LOCAL_KEY"], body, name, int(time.time())),
        TASK_NAME_HEADER: name,
    }
    return httpx.post(functions.tasks, content=body, headers=headers, timeout=30).status_code


def test_e2e_progress_steps_append_across_a_redelivered_and_a_retried_attempt(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # Three planned lessons; the second's draft fails once (the attempt fails and is
    # retried), the first is slow (its attempt is delivered again while it runs).
    topic = "river journeys"
    args = {"topic": topic, "audience": "Year 4", "count": 3}
    fake_openai.script(
        "plan three river journeys",
        Script(
            chunks=["Planning them now."],
            tool_calls=[("plan_lessons", json.dumps(args))],
            then=Script(chunks=["Your three lessons are ready."]),
        ),
    )
    fake_openai.script("Plan a sequence of 3 lessons.", Script(chunks=[json.dumps(PLAN)]))
    # The first draft is held until its attempt has been delivered again meanwhile.
    hold = Hold(at=0)
    for index, lesson in enumerate(PLAN["lessons"]):
        draft = Script(
            chunks=[f"<lesson><h1>{lesson['title']}</h1><h2>Starter</h2>", "<p>Go.</p></lesson>"],
            hold=hold if index == 0 else None,
        )
        if index == 1:
            fake_openai.script(planned_brief(topic, index), Script(status=400), after=draft)
        else:
            fake_openai.script(planned_brief(topic, index), draft)
    events = send(functions.api, alice, "plan three river journeys")
    conversation_id = events[0].data["conversationId"]
    task_id = events[-2].data["taskId"]
    updates = Updates(db, alice.uid, task_id)
    try:
        hold.wait_held("the first lesson's draft")
        # Delivered again while its first attempt runs: the other delivery holds it.
        assert redeliver(functions, alice.uid, conversation_id, task_id, 1) == 409
    finally:
        hold.release()

    section = section_when(db, alice.uid, task_id, "completed", 60)
    wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up")
    # Delivered again once it is over: each attempt is stale, nothing changes.
    assert redeliver(functions, alice.uid, conversation_id, task_id, 1) == 200
    assert redeliver(functions, alice.uid, conversation_id, task_id, 2) == 200
    assert section_of(db, alice.uid, task_id) == section
    updates.close()
    steps = [(u["seq"], u["attempt"], u["step"], u["text"]) for u in section["updates"]]
    assert steps == [
        (1, 1, 1, "Planning 3 lessons"),
        (2, 1, 2, "Creating lesson 1 of 3"),
        (3, 1, 3, "Creating lesson 2 of 3"),
        # The retry found the plan and the first lesson made: it went on from the second,
        # its steps numbered on from the first attempt's.
        (4, 2, 4, "Creating lesson 2 of 3"),
        (5, 2, 5, "Creating lesson 3 of 3"),
    ]
    # Each version a listener saw extends the one before: steps append, never replaced.
    for before, after in itertools.pairwise(updates.seen):
        assert after[: len(before)] == before, (before, after)
    assert updates.seen[-1] == steps
    assert len(fake_openai.requests_for(planned_brief(topic, 1))) == 2
    assert len(fake_openai.requests_for(planned_brief(topic, 0))) == 1


def test_e2e_plan_lessons_leaves_each_planned_lesson_readable(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    topic = "river mouths"
    args = {"topic": topic, "audience": "Year 4", "count": 3}
    fake_openai.script(
        "plan three river mouths",
        Script(
            chunks=["Planning them now."],
            tool_calls=[("plan_lessons", json.dumps(args))],
            then=Script(chunks=["Your three lessons are ready."]),
        ),
    )
    fake_openai.script("Plan a sequence of 3 lessons.", Script(chunks=[json.dumps(PLAN)]))
    for index, lesson in enumerate(PLAN["lessons"]):
        fake_openai.script(
            planned_brief(topic, index),
            Script(
                chunks=[f"<lesson><h1>{lesson['title']}</h1><h2>Starter</h2><p>Go.</p></lesson>"]
            ),
        )
    events = send(functions.api, alice, "plan three river mouths")
    conversation_id = events[0].data["conversationId"]
    task_id = events[-2].data["taskId"]
    doc = wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up", 60)
    section = section_when(db, alice.uid, task_id, "completed")
    assert (section["status"], section["tool"]) == ("completed", "plan_lessons")
    assert section["summary"] == "Planned and wrote 3 lessons."
    planned = section["keyOutputs"]
    assert [(o["kind"], o["text"]) for o in planned] == [
        ("planned_lesson", "Sources"),
        ("planned_lesson", "Bends"),
        ("planned_lesson", "Mouths"),
    ]
    (result,) = [
        p["toolResult"] for m in doc["messages"] for p in m["content"] if "toolResult" in p
    ]
    made = json.loads(result["outputJson"])["lessons"]
    assert [o["documentId"] for o in planned] == [lesson["documentId"] for lesson in made]
    lessons = db.collection(alice.uid).document("client").collection("lessons")
    for output in planned:
        stored = lessons.document(output["documentId"]).get().to_dict() or {}
        assert (stored["title"], stored["status"]) == (output["text"], "ready")


def test_e2e_a_task_whose_call_rolled_over_into_the_archive_stays_readable(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # An api instance whose conversations roll over as soon as they pass 16 KB, keeping
    # the last two messages live.
    small = extra_api(functions, SPARK_LIVE_DOC_BYTES="16384", SPARK_HISTORY_MESSAGES="2")
    try:
        script_lesson(
            fake_openai,
            "section lesson on lagoons",
            "lagoons",
            Script(chunks=["<lesson><h1>Lagoons</h1><h2>Starter</h2>", "<p>Go.</p></lesson>"]),
        )
        events = send(small.url, alice, "section lesson on lagoons")
        conversation_id = events[0].data["conversationId"]
        task_id, call_id = events[-2].data["taskId"], events[-2].data["toolCallId"]
        wait_for(lambda: finished(db, alice.uid, conversation_id), "the follow-up", 60)
        before = section_when(db, alice.uid, task_id, "completed")
        for n in range(3):
            # Streamed, so the reply runs (and the conversation rolls over) in that api.
            with httpx.stream(
                "POST",
                f"{small.url}/api/spark/agent/messages",
                headers={"Authorization": f"Bearer {alice.token}", "Accept": "text/event-stream"},
                json={
                    "conversationId": conversation_id,
                    "text": f"note {n}: " + "the tide comes in. " * 500,
                },
                timeout=30,
            ) as r:
                more = [e for e in read_events(r) if isinstance(e, SseEvent)]
            assert more[-1].event == "done", more[-1]

        def archived() -> dict[str, Any] | None:
            doc = conversation_doc(db, alice.uid, conversation_id) or {}
            live = json.dumps(doc.get("messages") or [], default=str)
            return doc if doc.get("archived") and call_id not in live else None

        doc = wait_for(archived, "the task's call to roll over into the archive")
    finally:
        small.stack.stop()
    assert doc["archived"]["count"] >= 4
    segments = (
        db.collection(alice.uid)
        .document("client")
        .collection("conversations")
        .document(conversation_id)
        .collection("archive")
        .stream()
    )
    assert call_id in json.dumps([s.to_dict() for s in segments], default=str)
    # The section is its own document: as it was, and listed with its conversation.
    assert section_of(db, alice.uid, task_id) == before
    assert before["summary"] == "Created the lesson “Lagoons”."
    (lesson,) = before["keyOutputs"]
    assert (lesson["kind"], lesson["text"]) == ("lesson", "Lagoons")
    listed = (
        sections_of(db, alice.uid)
        .where(filter=firestore.FieldFilter("conversationId", "==", conversation_id))
        .order_by("createdAt", direction=firestore.Query.DESCENDING)
        .stream()
    )
    assert [s.id for s in listed] == [task_id]
