"""The demo model end to end, as a newcomer meets it: no provider key set, two api and
two tasks processes on the emulators, audited after each test. Its examples are walked
through in one conversation (one stack for them all, to keep the suite's time down):
a lesson (a task, its section, a lesson valid against the grammar), a quiz (a question
card, then a reply that uses the answer), a skill, the family's messages, a message to
Mum (its approval), the lesson deleted (its approval), a plan of three lessons, work
checked, and anything else; then the web client offers the examples and its first
one, clicked, shows a task section and the lesson's preview."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google.cloud import firestore
from playwright.sync_api import BrowserContext, expect

from shared.lessons.grammar import validate
from shared.llm.demo import EXAMPLES, PREFIX
from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e import test_web
from tests.e2e.conftest import (
    Functions,
    SseEvent,
    StackUser,
    auth,
    conversation_doc,
    conversation_path,
    new_user,
    offline_functions,
    read_events,
    upload,
    wait_for,
)
from tests.e2e.test_web import articles, conversation_id, on_phone, open_page, shot
from tests.samples import png_with_gps

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"
FAMILIES = "/api/spark/families"
# The browser test's fixtures, here on this module's stack (``functions`` below).
browser = test_web.browser
context = test_web.context
web = test_web.web


@pytest.fixture(scope="module")
def functions(emulators: tuple[str, str]) -> Iterator[Functions]:
    """The stack with no provider key (nor base URL): the demo model answers."""
    with offline_functions("demo") as stack:
        yield stack


class Conversation:
    """One conversation with the agent, a turn at a time, read back from Firestore."""

    def __init__(self, api: str, db: firestore.Client, user: StackUser) -> None:
        self.api, self.db, self.user = api, db, user
        self.id: str | None = None
        self.seen: set[str] = set()

    def send(self, text: str, **body: Any) -> list[SseEvent]:
        if self.id is not None:
            body["conversationId"] = self.id
        return self.post(SEND, {"text": text, **body})

    def post(self, path: str, body: dict[str, Any]) -> list[SseEvent]:
        with httpx.stream(
            "POST", self.api + path, headers=auth(self.user), json=body, timeout=60
        ) as response:
            assert response.status_code == 200, response.read()
            events = [e for e in read_events(response) if isinstance(e, SseEvent)]
        self.id = self.id or events[0].data["conversationId"]
        return events

    def answer(self, call_id: str, kind: str, body: dict[str, Any]) -> None:
        """An answer or a decision (an approved call runs on a task: 202, no stream)."""
        assert self.id is not None
        url = self.api + conversation_path(self.id, kind)
        sent = httpx.post(url, headers=auth(self.user), json={"toolCallId": call_id, **body})
        assert sent.status_code in (200, 202), sent.text

    def doc(self) -> dict[str, Any]:
        assert self.id is not None
        return conversation_doc(self.db, self.user.uid, self.id) or {}

    def reply(self, timeout: float = 30) -> str:
        """The text of the next reply in words, once the conversation is at rest."""

        def new() -> str | None:
            doc = self.doc()
            last = doc.get("messages", [{}])[-1]
            if "activeRun" in doc or last.get("role") != "assistant" or last["id"] in self.seen:
                return None
            text = "".join(p.get("text", "") for p in last["content"] if p["type"] == "text")
            if last["status"] != "complete" or not text:
                return None
            self.seen.add(last["id"])
            return text

        text: str = wait_for(new, timeout)
        assert text.startswith(PREFIX), text
        return text


def lessons_of(db: firestore.Client, uid: str) -> dict[str, dict[str, Any]]:
    listed = db.collection(uid).document("client").collection("lessons").stream()
    return {s.id: s.to_dict() or {} for s in listed}


def section(db: firestore.Client, uid: str, task_id: str) -> dict[str, Any]:
    ref = db.collection(uid).document("client").collection("tasks").document(task_id)
    return wait_for(lambda: (d := ref.get().to_dict() or {}).get("status") == "completed" and d)


def family(api: str, sam: StackUser, mum: StackUser) -> None:
    """Sam's family, with Mum in it, and a message Mum wrote to it."""
    with httpx.Client(base_url=api, timeout=30) as client:
        as_sam, as_mum = auth(sam, sse=False), auth(mum, sse=False)
        made = client.post(FAMILIES, headers=as_sam, json={"name": "Ours", "displayName": "Sam"})
        assert made.status_code == 201, made.text
        invites = f"{FAMILIES}/{made.json()['family']['id']}/invites"
        link = client.post(invites, headers=as_sam, json={"role": "parent"})
        token = link.json()["token"]
        joined = client.post(
            f"{FAMILIES}/join", headers=as_mum, json={"token": token, "displayName": "Mum"}
        )
        assert joined.status_code == 200, joined.text
        sent = client.post(
            SEND, headers=as_mum, json={"text": "Pizza tonight", "targetFamily": True}
        )
        assert sent.status_code == 201, sent.text


def test_e2e_demo_model_walks_through_its_examples_with_the_real_tools(
    functions: Functions,
    emulators: tuple[str, str],
    db: firestore.Client,
    bucket: CloudStorageFileStore,
) -> None:
    sam, mum = new_user(emulators[1]), new_user(emulators[1])
    with httpx.Client(timeout=30) as client:
        model = client.get(functions.api + "/api/spark/agent/model", headers=auth(sam, sse=False))
    assert model.json() == {"model": "offline model", "demo": True, "examples": list(EXAMPLES)}
    family(functions.api, sam, mum)
    chat = Conversation(functions.api, db, sam)

    # A lesson: a task, its section, a lesson valid against the grammar, the follow-up.
    events = chat.send(EXAMPLES[0])
    assert [e.event for e in events][-2:] == ["task_queued", "done"]
    assert chat.reply().startswith(PREFIX + "Your lesson “The water cycle” is ready")
    assert section(db, sam.uid, events[-2].data["taskId"])["tool"] == "create_lesson"
    ((lesson_id, lesson),) = lessons_of(db, sam.uid).items()
    validate(lesson["body"])

    # A quiz: a question card; the reply uses the answer.
    events = chat.send(EXAMPLES[2])
    question = next(e.data for e in events if e.event == "question")
    chat.answer(question["toolCallId"], "answers", {"answers": {"0": "Condensation"}})
    assert "that's right" in chat.reply()

    # A skill, read with load_skill.
    chat.send(EXAMPLES[3])
    assert "fill-blanks rules" in chat.reply()

    # The family's messages, then a message to Mum, sent once approved.
    chat.send(EXAMPLES[4])
    assert "Mum: “Pizza tonight”" in chat.reply()
    events = chat.send(EXAMPLES[5])
    card = next(e.data for e in events if e.event == "approval_required")
    assert card["args"]["to"] == mum.uid and card["args"]["text"] == "I'll be home by six"
    chat.answer(card["toolCallId"], "approvals", {"approved": True})
    assert "Sent to Mum" in chat.reply()

    # The open lesson deleted, once approved.
    events = chat.send(EXAMPLES[6])
    card = next(e.data for e in events if e.event == "approval_required")
    assert card["args"] == {"lessonId": lesson_id}
    chat.answer(card["toolCallId"], "approvals", {"approved": True})
    assert "I deleted “The water cycle”" in chat.reply()
    assert lesson_id not in lessons_of(db, sam.uid)

    # A plan of three lessons, each written.
    events = chat.send(EXAMPLES[1])
    assert chat.reply(60).startswith(PREFIX + "Your 3 lessons are written")
    assert section(db, sam.uid, events[-2].data["taskId"])["tool"] == "plan_lessons"
    planned = lessons_of(db, sam.uid).values()
    assert len(planned) == 3 and all(p["status"] == "ready" for p in planned)

    # Work checked: review_work on the attached image.
    path = f"{sam.uid}/uploads/homework.png"
    attachment = upload(bucket, path, png_with_gps(), "image/png")
    events = chat.send("Please check my work, out of 10", attachments=[attachment])
    assert chat.reply().startswith(PREFIX + "Feedback on homework.png")
    assert section(db, sam.uid, events[-2].data["taskId"])["tool"] == "review_work"

    # Anything else: what it can show.
    chat.send("What is the capital of France?")
    answer = chat.reply()
    assert all(f"“{example}”" in answer for example in EXAMPLES)
    calls = [
        p["toolCall"]["name"]
        for m in chat.doc()["messages"]
        for p in m["content"]
        if "toolCall" in p
    ]
    assert calls == [
        "create_lesson",
        "ask_user_question",
        "load_skill",
        "read_family_messages",
        "list_family_members",
        "send_family_message",
        "delete_lesson",
        "plan_lessons",
        "review_work",
    ]


def test_web_demo_model_offers_its_examples_and_the_first_makes_a_lesson(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
) -> None:
    user = new_user(emulators[1])
    page = open_page(context, web, user)
    offered = page.get_by_role("region", name="Try the demo model")
    expect(offered.get_by_role("button")).to_have_count(len(EXAMPLES))
    offered.get_by_role("button", name=EXAMPLES[0]).click()
    conv = conversation_id(page)
    expect(offered).to_be_hidden()
    reply = articles(page, "Spark AI Agent").last
    expect(reply).to_contain_text("Your lesson “The water cycle” is ready")
    first = articles(page, "Spark AI Agent").first
    first.get_by_role("button", name="Done (1 step)").click()
    expect(first.get_by_role("region", name="Task:")).to_contain_text("completed")
    lesson = page.get_by_role("region", name="Lesson: The water cycle")
    expect(lesson).to_contain_text("The Sun's heat makes water evaporate")
    shot(page, "demo-first-example")
    assert conversation_doc(db, user.uid, conv) is not None
    on_phone(page, "demo-first-example", reply)
