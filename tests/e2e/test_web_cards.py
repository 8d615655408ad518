"""The web client's cards in words, task sections and lesson versions (issue 37), in
Debian's Chromium against the whole local stack, as ``test_web.py`` drives it (its
fixtures, reused): an approval card names the action and its object, its arguments
behind "Details"; a task's section shows its progress steps as they come and is
cancelled from the page; an earlier version of a lesson is restored from the lesson
panel. Each page is audited by axe-core as it is shown (serious and critical
violations only), and screenshots go to ``.stack/screenshots/``.
"""

from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from google.cloud import firestore
from playwright.sync_api import BrowserContext, Locator, expect

from shared.store.cloudstorage import CloudStorageFileStore
from tests.e2e import test_web
from tests.e2e.conftest import (
    Functions,
    StackUser,
    conversation_doc,
    new_user,
    upload,
    wait_for,
)
from tests.e2e.test_review import FEEDBACK
from tests.e2e.test_tasks import script_lesson
from tests.e2e.test_tasks import send as send_by_api
from tests.e2e.test_web import (
    SHOTS,
    articles,
    audit,
    conversation_id,
    last_reply_text,
    on_phone,
    open_page,
    send,
    shot,
)
from tests.fakes.openai_server import FakeOpenAI, Hold, Script
from tests.samples import pdf_with_pages

pytestmark = pytest.mark.emulator

# test_web's fixtures: the web client served against the stack, the browser, a context.
web = test_web.web
browser = test_web.browser
context = test_web.context

TIDES = "<lesson><h1>Tides</h1><p>The sea rises twice a day.</p></lesson>"


def element_shot(target: Locator, name: str) -> None:
    target.screenshot(path=str(SHOTS / f"{name}.png"))


def seed_lesson(db: firestore.Client, uid: str, title: str) -> str:
    lesson_id = f"les_{secrets.token_hex(4)}"
    now = datetime.now(UTC)
    db.document(f"{uid}/client/lessons/{lesson_id}").set(
        {
            "id": lesson_id,
            "title": title,
            "body": TIDES,
            "version": 1,
            "status": "ready",
            "createdAt": now,
            "updatedAt": now,
        }
    )
    return lesson_id


def family_with_mum(api: str, user: StackUser, mum: StackUser) -> None:
    """``user`` makes a family (as "Sam") and ``mum`` joins it as a parent, "Mum"."""
    with httpx.Client(base_url=api, timeout=30) as client:
        made = client.post(
            "/api/spark/families",
            headers={"Authorization": f"Bearer {user.token}"},
            json={"name": "The Smiths", "displayName": "Sam"},
        )
        assert made.status_code == 201, made.text
        family_id = made.json()["family"]["id"]
        link = client.post(
            f"/api/spark/families/{family_id}/invites",
            headers={"Authorization": f"Bearer {user.token}"},
            json={"role": "parent"},
        )
        assert link.status_code == 201, link.text
        joined = client.post(
            "/api/spark/families/join",
            headers={"Authorization": f"Bearer {mum.token}"},
            json={"token": link.json()["token"], "displayName": "Mum"},
        )
        assert joined.status_code == 200, joined.text


def cancel_asked(db: firestore.Client, uid: str) -> bool:
    """Whether any of ``uid``'s tasks has been asked to stop (its ledger record says so)."""
    tasks = (db.collection(uid).document("server").get().to_dict() or {}).get("tasks") or {}
    return any(t.get("cancelRequested") for t in tasks.values())


def task_doc(db: firestore.Client, uid: str, conv: str) -> dict[str, Any] | None:
    sections = db.collection(f"{uid}/client/tasks")
    found = sections.where(filter=firestore.FieldFilter("conversationId", "==", conv)).get()
    return found[0].to_dict() if found else None


def test_cards_an_approval_reads_in_words_its_arguments_behind_details(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user, mum = new_user(emulators[1]), new_user(emulators[1])
    family_with_mum(functions.api, user, mum)
    lesson_id = seed_lesson(db, user.uid, "Tides")
    home = "I'll be home by six"
    fake_openai.script(
        "cards: delete tides and tell mum",
        Script(
            chunks=["Both need your approval."],
            tool_calls=[
                ("delete_lesson", json.dumps({"lessonId": lesson_id})),
                ("send_family_message", json.dumps({"to": mum.uid, "text": home})),
            ],
            then=Script(chunks=["Deleted, and nothing sent."]),
        ),
    )
    page = open_page(context, web, user)
    send(page, "cards: delete tides and tell mum")
    conv = conversation_id(page)
    panel = page.get_by_role("region", name="Waiting for your approval")
    delete = panel.get_by_role("listitem", name="Delete the lesson “Tides”", exact=True)
    message = panel.get_by_role("listitem", name=f"Send to Mum (parent): “{home}”", exact=True)
    expect(delete).to_be_visible()
    expect(message).to_be_visible()
    # The raw arguments are there for those who open "Details", and only then.
    arguments = delete.get_by_label("Arguments")
    expect(arguments).to_be_hidden()
    delete.get_by_text("Details", exact=True).click()
    expect(arguments).to_be_visible()
    expect(arguments).to_contain_text(lesson_id)
    expect(delete).to_contain_text("Tool: delete_lesson")
    element_shot(panel, "cards-approval-in-words")
    shot(page, "cards-approval-page")
    found = audit(page)
    assert found == [], json.dumps(found, indent=1)
    on_phone(page, "card-in-words", delete, message)  # and answered on a phone

    delete.get_by_role("button", name="Approve").click()
    message.get_by_role("button", name="Deny").click()
    expect(panel).to_be_hidden()
    expect(articles(page, "Spark AI Agent").last).to_contain_text("Deleted, and nothing sent.")
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    assert not db.document(f"{user.uid}/client/lessons/{lesson_id}").get().exists
    doc = conversation_doc(db, user.uid, conv) or {}
    calls = {
        p["toolCall"]["name"]: p["toolCall"]
        for m in doc["messages"]
        for p in m["content"]
        if p["type"] == "tool_call"
    }
    assert calls["delete_lesson"]["displayText"] == "Delete the lesson “Tides”"
    assert calls["send_family_message"]["status"] == "denied"


def test_cards_a_task_section_shows_its_progress_steps_as_they_come(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    # The draft is held after its first piece until the page has been seen drafting
    # (it was three seconds of paced pieces): then it goes on.
    draft = ["<lesson><h1>Tides</h1>", *(f"<p>Line {n}.</p>" for n in range(8)), "</lesson>"]
    hold = Hold(at=1)
    script_lesson(
        fake_openai,
        "cards: a lesson on tides",
        "tides step by step",
        Script(chunks=draft, hold=hold),
    )
    page = open_page(context, web, user)
    try:
        send(page, "cards: a lesson on tides")
        conv = conversation_id(page)
        section = page.get_by_role("region", name="Task: Creating lesson")
        steps = section.get_by_role("list", name="Progress")
        expect(section).to_contain_text("running")
        expect(steps).to_contain_text("Drafting the lesson")
        # Every count of steps the page showed, as it showed them.
        page.evaluate(
            """() => {
            window.__steps = [];
            new MutationObserver(() => {
              const list = document.querySelector('section.task ol.updates');
              const n = list ? list.children.length : 0;
              if (window.__steps[window.__steps.length - 1] !== n) window.__steps.push(n);
            }).observe(document.getElementById('messages'), {childList: true, subtree: true});
          }"""
        )
        element_shot(section, "cards-task-drafting")
        found = audit(page)
    finally:
        hold.release()
    expect(articles(page, "Spark AI Agent").last).to_contain_text("Your lesson is ready.")
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    first = articles(page, "Spark AI Agent").first
    first.get_by_role("button", name="Done (1 step)").click()
    expect(section).to_contain_text("completed")
    expect(steps.get_by_role("listitem")).to_have_text(
        ["Drafting the lesson", "Checking the draft", "Saving the lesson"]
    )
    expect(section).to_contain_text("Tides")  # its key output, the lesson
    expect(section.get_by_role("button", name="Cancel")).to_have_count(0)
    seen = [n for n in page.evaluate("window.__steps") if n]
    # Appended as they came: the page showed more steps after the first it showed.
    assert seen and seen[-1] == 3 and len(seen) >= 2, seen
    element_shot(first, "cards-task-completed")
    found += audit(page)
    assert found == [], json.dumps(found, indent=1)
    stored = task_doc(db, user.uid, conv) or {}
    assert [u["text"] for u in stored["updates"]] == [
        "Drafting the lesson",
        "Checking the draft",
        "Saving the lesson",
    ]
    on_phone(page, "task-completed", steps)


def test_cards_a_running_task_is_cancelled_from_the_page(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    # A held draft: the task is running (drafting) when Cancel is pressed, and stops at
    # its next step, once the draft is in (let go once the cancel has been asked for).
    draft = ["<lesson><h1>Slow</h1>", *(f"<p>Line {n}.</p>" for n in range(12)), "</lesson>"]
    hold = Hold(at=1)
    script_lesson(
        fake_openai,
        "cards: a slow lesson",
        "a slow lesson to cancel",
        Script(chunks=draft, delay=0.1, hold=hold),
        follow_up="Cancelled, as you asked.",
    )
    try:
        page = open_page(context, web, user)
        send(page, "cards: a slow lesson")
        conv = conversation_id(page)
        section = page.get_by_role("region", name="Task: Creating lesson")
        expect(section.get_by_role("list", name="Progress")).to_contain_text("Drafting the lesson")
        element_shot(section, "cards-task-running")
        section.get_by_role("button", name="Cancel").click()
        wait_for(lambda: cancel_asked(db, user.uid), what="the cancel to reach the task")
    finally:
        hold.release()
    wait_for(lambda: (task_doc(db, user.uid, conv) or {}).get("status") == "cancelled")
    expect(articles(page, "Spark AI Agent").last).to_contain_text("Cancelled, as you asked.")
    # Its call has its result: the step is folded into "Done (1 step)", to be opened.
    first = articles(page, "Spark AI Agent").first
    first.get_by_role("button", name="Done (1 step)").click()
    expect(section).to_contain_text("cancelled")
    expect(section.get_by_role("button", name="Cancel")).to_have_count(0)
    element_shot(first, "cards-task-cancelled")
    # It stopped at the step after the draft: no lesson was saved.
    assert db.collection(f"{user.uid}/client/lessons").get() == []
    on_phone(page, "task-cancelled", section)


def test_cards_a_queued_task_is_cancelled_from_the_page(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    """A user's fourth task waits queued behind three running (a user runs three at
    once): its section says so, with Cancel, and Cancel, pressed on a phone, ends it at
    once without its tool ever starting. The three are asked through the api."""
    user = new_user(emulators[1])
    # Held drafts hold the three slots until the fourth has been cancelled.
    hold = Hold(at=0)
    slow = Script(chunks=["<lesson><h1>Busy</h1></lesson>"], hold=hold)
    for n in range(3):
        script_lesson(fake_openai, f"cards: busy lesson {n}", f"busy lesson {n}", slow)
        send_by_api(functions.api, user, f"cards: busy lesson {n}")
    script_lesson(
        fake_openai,
        "cards: one lesson more",
        "a lesson that waits its turn",
        Script(chunks=[TIDES]),
        follow_up="Cancelled before it started.",
    )
    conv = send_by_api(functions.api, user, "cards: one lesson more")[0].data["conversationId"]
    assert (task_doc(db, user.uid, conv) or {}).get("status") == "queued"
    page = open_page(context, web, user, path=f"/#/c/{conv}")
    section = page.get_by_role("region", name="Task: Creating lesson")
    expect(section).to_contain_text("queued")
    on_phone(page, "task-queued", section)  # and cancelled on a phone
    try:
        section.get_by_role("button", name="Cancel").click()
        wait_for(lambda: (task_doc(db, user.uid, conv) or {}).get("status") == "cancelled")
    finally:
        hold.release()
    expect(articles(page, "Spark AI Agent").last).to_contain_text("Cancelled before it started.")
    first = articles(page, "Spark AI Agent").first
    first.get_by_role("button", name="Done (1 step)").click()
    expect(section).to_contain_text("cancelled")
    expect(section.get_by_role("button", name="Cancel")).to_have_count(0)
    shot(page, "phone-task-queued-cancelled")
    stored = task_doc(db, user.uid, conv) or {}
    assert not stored.get("startedAt") and not stored.get("updates")  # it never ran


def test_cards_a_waiting_task_shows_its_question_and_goes_on_once_answered(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
    bucket: CloudStorageFileStore,
) -> None:
    """A review that must ask which task the work answers: its section says the question
    while it waits, the page's question cards answer it, and the same section goes on to
    its summary and key outputs. The work is sent through the api (its attachment made
    as a client's upload), and the page opens the conversation."""
    user = new_user(emulators[1])
    ask = "cards: review my homework sheet"
    path = f"{user.uid}/uploads/sheet.pdf"
    sheet = pdf_with_pages("Task 1: leaves", "Task 2: roots")
    # In a thread of its own: Playwright's sync API keeps an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        pdf = pool.submit(upload, bucket, path, sheet, "application/pdf").result()
    fake_openai.script(
        ask,
        Script(
            chunks=["I will review it."],
            tool_calls=[("review_work", json.dumps({"file": path, "brief": "The sheet."}))],
            then=Script(chunks=["Here is your feedback on task 2."]),
        ),
    )
    question = {"question": "Which task does this answer?", "options": ["Task 1", "Task 2"]}
    fake_openai.script(
        "Review this piece of work.", Script(chunks=[json.dumps({"question": question})])
    )
    sent = httpx.post(
        f"{functions.api}/api/spark/agent/messages",
        headers={"Authorization": f"Bearer {user.token}"},
        json={"text": ask, "attachments": [pdf]},
        timeout=30,
    )
    assert sent.status_code == 202, sent.text
    conv = sent.json()["conversationId"]
    page = open_page(context, web, user, path=f"/#/c/{conv}")
    section = page.get_by_role("region", name="Task: Reviewing sheet.pdf")
    expect(section).to_contain_text("waiting for your answer")
    expect(section).to_contain_text("Waiting for your answer: Which task does this answer?")
    expect(section.get_by_role("button", name="Cancel")).to_be_visible()
    element_shot(section, "cards-task-waiting")
    found = audit(page)
    on_phone(page, "task-waiting", section)  # and answered on a phone

    fake_openai.script("Review this piece of work.", Script(chunks=[json.dumps(FEEDBACK)]))
    page.get_by_role("button", name="Task 2").click()
    page.get_by_role("button", name="Continue").click()
    expect(articles(page, "Spark AI Agent").last).to_contain_text(
        "Here is your feedback on task 2."
    )
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    first = articles(page, "Spark AI Agent").first
    first.get_by_role("button", name="Done (1 step)").click()
    expect(section).to_contain_text("completed")
    expect(section).to_contain_text(str(FEEDBACK["summary"]))
    expect(section).to_contain_text("Strength: You explain that leaves take in light.")
    expect(section).not_to_contain_text("Waiting for your answer")
    # Answered, the review ran again: its steps follow the first attempt's, every one kept.
    read = ["Reading the work", "Reviewing the work", "Checking the feedback"]
    expect(section.get_by_role("list", name="Progress").get_by_role("listitem")).to_have_text(
        read + read
    )
    # The message that held the answered question shows nothing more: no empty article.
    agent = articles(page, "Spark AI Agent")
    expect(agent).to_have_count(2)
    assert agent.evaluate_all("as => as.filter(a => a.childElementCount < 2).length") == 0
    found += audit(page)
    assert found == [], json.dumps(found, indent=1)
    stored = task_doc(db, user.uid, conv) or {}
    assert stored["status"] == "completed"
    assert [(u["attempt"], u["step"]) for u in stored["updates"]] == [
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 4),
        (2, 5),
        (2, 6),
    ]
    shot(page, "phone-task-resumed")


def test_cards_an_earlier_lesson_version_is_restored_from_the_lesson_panel(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    script_lesson(
        fake_openai, "cards: a lesson to change", "tides to restore", Script(chunks=[TIDES])
    )
    edit = {"find": "rises twice a day.", "replace": "is calm today."}
    fake_openai.script(
        "cards: change the lesson",
        Script(
            chunks=[],
            tool_calls=[("edit_document", json.dumps(edit))],
            then=Script(chunks=["Changed."]),
        ),
    )
    page = open_page(context, web, user)
    send(page, "cards: a lesson to change")
    conv = conversation_id(page)
    lesson = page.get_by_role("region", name="Lesson: Tides")
    expect(lesson).to_contain_text("The sea rises twice a day.")
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    send(page, "cards: change the lesson")
    expect(lesson).to_contain_text("The sea is calm today.")
    lesson_id = (conversation_doc(db, user.uid, conv) or {})["documentId"]

    lesson.get_by_text("Earlier versions", exact=True).click()
    restore = lesson.get_by_role("button", name="Restore version 1")
    expect(lesson.get_by_role("list", name="Earlier versions")).to_contain_text(
        "Version 1: “Tides”"
    )
    element_shot(lesson, "cards-lesson-versions")
    found = audit(page)
    restore.click()
    expect(lesson.get_by_role("status")).to_have_text("Version 1 restored: it is version 3 now.")
    expect(lesson).to_contain_text("The sea rises twice a day.")
    # The list follows the lesson: the version the restore replaced is kept too.
    expect(lesson.get_by_role("button", name="Restore version 2")).to_be_visible()
    found += audit(page)
    assert found == [], json.dumps(found, indent=1)
    stored = db.document(f"{user.uid}/client/lessons/{lesson_id}").get().to_dict() or {}
    assert stored["version"] == 3 and "rises twice a day." in stored["body"]
    shot(page, "cards-lesson-restored")
    on_phone(page, "lesson-restored", lesson, pane="Family and editor")
