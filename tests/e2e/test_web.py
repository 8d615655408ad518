"""The reference web client (``web/``, served by ``tools/web.py``) in a real browser:
Debian's Chromium driven by Playwright, against the whole local stack (two api and two
tasks processes, the emulators) and the fake OpenAI server.

The page renders only from Firestore listeners, so each check compares what it shows
with what Firestore holds. Screenshots of each step go to ``.stack/screenshots/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.cloud import firestore
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Locator,
    Page,
    expect,
    sync_playwright,
)

from tests.e2e.conftest import (
    Functions,
    SseEvent,
    StackUser,
    auth,
    conversation_doc,
    extra_api,
    new_user,
    read_events,
    wait_for,
)
from tests.e2e.test_tasks import script_lesson
from tests.fakes.openai_server import FakeOpenAI, Hold, Script
from tests.samples import png_with_gps
from tools.stack import Stack, free_port
from tools.web import ROOT, build

pytestmark = pytest.mark.emulator

CHROMIUM = os.environ.get("SPARK_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / ".stack" / "screenshots"
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
# Every wait in the page is bounded, as a safety net only: a stuck page fails its test in
# a minute, not never; what is awaited takes a second or a few, on a loaded machine too.
TIMEOUT_MS = 60_000
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def web(functions: Functions) -> Iterator[str]:
    """The web client, freshly built, served against the stack's api (as make dev does)."""
    build()
    with served(functions) as url:
        yield url


@contextlib.contextmanager
def served(functions: Functions, *options: str) -> Iterator[str]:
    """``tools/web.py`` serving against the stack's api (``options``: its own, such as
    ``--site``), at the address given."""
    port = free_port()
    logs = Path(os.environ.get("SPARK_STACK_LOGS") or ROOT / ".stack")
    stack = Stack(logs)
    command = [sys.executable, "-m", "tools.web", "serve", f"--port={port}", *options]
    stack.spawn("web", [*command, f"--api={functions.api}"])
    try:
        stack.wait_ready("web", f"http://127.0.0.1:{port}/config.json", timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make setup` installs Debian's chromium")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root (a container), where Chromium's own
        # sandbox cannot start.
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = person(browser)
    _SAID.clear()
    try:
        yield made
    finally:
        made.close()


def person(browser: Browser) -> BrowserContext:
    """A context of its own for one person (Firebase keeps one user per origin), on a
    desktop's screen, its words recorded (``recorded``)."""
    return recorded(browser.new_context(viewport=DESKTOP, locale="en-GB"))


def recorded(made: BrowserContext) -> BrowserContext:
    """``made``, bounded by ``TIMEOUT_MS``, its pages' words kept for a failure's message
    (a second person's context too: a failure on their page would otherwise say nothing)."""
    made.set_default_timeout(TIMEOUT_MS)
    made.on("console", lambda m: _SAID.append(f"console {m.type}: {m.text}"))
    made.on("requestfailed", lambda r: _SAID.append(f"failed: {r.method} {r.url} {r.failure}"))
    # An exception no code caught (one thrown in a listener's callback, say) is no
    # console message: it is a page error.
    made.on("weberror", lambda e: _SAID.append(f"page error: {e.error}"))
    made.on(
        "request",
        lambda r: _SAID.append(f"sent: {r.method} {r.url}") if "/api/" in r.url else None,
    )
    made.on(
        "requestfinished",
        lambda r: _SAID.append(f"done: {r.method} {r.url}") if "/api/" in r.url else None,
    )
    return made


_SAID: list[str] = []


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(
    page: Page, web: str, user: StackUser, password: str = "secret-123", path: str = "/"
) -> None:
    """Signs in through the form (on the page at ``path``), by keyboard only."""
    page.goto(web + path)
    page.get_by_label("Email").fill(user.email)
    page.get_by_label("Password").fill(password)
    page.get_by_label("Password").press("Enter")
    expect(page.get_by_text(f"Signed in as {user.email}")).to_be_visible()
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()


def open_page(
    context: BrowserContext, web: str, user: StackUser, path: str = "/", *, token: bool = False
) -> Page:
    """A new page at ``path`` with ``user`` signed in: through the form, by keyboard
    (``sign_in``), or with ``token``, holding the user's ID token before the page's
    script runs (as a front end that signed in with Firebase Auth itself holds it)."""
    page = context.new_page()
    if not token:
        sign_in(page, web, user, path=path)
        return page
    page.add_init_script(f"window.sparkToken = {json.dumps(user.token)};")
    page.goto(web + path)
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()
    return page


def make_family(page: Page, name: str, my_name: str | None = None, *, enter: bool = False) -> Any:
    """Makes a family in the page's family panel (its maker's name in it ``my_name``;
    submitted by Enter in the last field filled with ``enter``), and returns the panel
    once it shows the family."""
    panel = page.get_by_role("region", name="Family")
    field = panel.get_by_role("textbox", name="Family name")
    field.fill(name)
    if my_name is not None:
        field = panel.get_by_role("textbox", name="Your name in the family")
        field.fill(my_name)
    if enter:
        field.press("Enter")
    else:
        panel.get_by_role("button", name="Create family").click()
    expect(page.get_by_role("region", name=f"Family: {name}")).to_be_visible()
    return panel


def on_phone(page: Page, name: str, *shown: Locator, pane: str = "Chat") -> None:
    """The page as it is, at 390×844: one column (``pane`` shown through the bar), nothing
    wider than the screen, ``shown`` visible in it, and no serious or critical axe
    violation; screenshot ``phone-<name>``. The scenario's end, in the same conversation,
    seen on a phone: the browser, the stack and the scenario are shared with the
    desktop's run instead of repeated."""
    page.set_viewport_size(PHONE)
    bar = page.get_by_role("navigation", name="Show")
    expect(bar).to_be_visible()
    bar.get_by_role("button", name=pane).click()
    for locator in shown:
        expect(locator).to_be_visible()
    assert not overflows(page), "the page scrolls sideways on a phone"
    found = audit(page)
    assert found == [], json.dumps(found, indent=1)
    # From the top: the bar sticks to the screen's top, so a page scrolled down would
    # show it over the pane in a whole-page screenshot.
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, f"phone-{name}")


def overflows(page: Page) -> bool:
    """Whether anything makes the page scroll sideways."""
    return bool(page.evaluate("document.documentElement.scrollWidth > window.innerWidth + 1"))


def send(page: Page, text: str) -> None:
    box = page.get_by_role("textbox", name="Message")
    box.fill(text)
    page.get_by_role("button", name="Send").click()
    try:
        expect(box).to_have_value("", timeout=TIMEOUT_MS)
    except AssertionError:
        status = page.locator("#composer-status").inner_text()
        said = "\n".join(_SAID[-30:])
        logs = Path(os.environ.get("SPARK_STACK_LOGS") or ROOT / ".stack") / "web.log"
        said += "\n" + logs.read_text()[-3000:]
        raise AssertionError(f"not sent; the page says {status!r}; and:\n{said}") from None


def conversation_id(page: Page) -> str:
    wait_for(lambda: page.evaluate("location.hash").startswith("#/c/"))
    return str(page.evaluate("location.hash")).removeprefix("#/c/")


def articles(page: Page, author: str) -> Any:
    return page.get_by_role("article", name=author)


def last_reply_text(db: firestore.Client, uid: str, conv: str) -> str | None:
    """The text of the conversation's last finished reply, once no run is active."""
    doc = conversation_doc(db, uid, conv)
    if not doc or "activeRun" in doc or doc.get("queuedMessages"):
        return None
    replies = [m for m in doc["messages"] if m["role"] == "assistant"]
    if not replies:
        return None
    return "".join(p.get("text", "") for p in replies[-1]["content"] if p["type"] == "text")


def watch_renders(page: Page) -> None:
    """Records the text of the last reply each time the page re-renders it."""
    page.evaluate(
        """() => {
        window.__renders = [];
        const log = document.getElementById('messages');
        new MutationObserver(() => {
          const replies = log.querySelectorAll('article.assistant .text');
          const last = replies[replies.length - 1];
          const text = last ? last.textContent : '';
          if (window.__renders[window.__renders.length - 1] !== text) window.__renders.push(text);
        }).observe(log, {childList: true, subtree: true, characterData: true});
      }"""
    )


def normal(text: str) -> str:
    return " ".join(text.split())


def test_web_a_reply_streams_in_from_firestore_and_ends_as_stored(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    words = [f"word{n} " for n in range(24)]
    # Let go in stages, each once the page shows the last: the reply grows on the page
    # however fast or slow the machine (it was two seconds of paced words).
    hold = Hold(at=6)
    fake_openai.script("web: stream please", Script(chunks=words, hold=hold))
    page = open_page(context, web, user)
    shot(page, "01-signed-in")
    watch_renders(page)
    box = page.get_by_role("textbox", name="Message")
    try:
        box.fill("web: stream please")
        box.press("Enter")  # sends, as the Send button does
        expect(box).to_have_value("")
        conv = conversation_id(page)
        expect(articles(page, "You")).to_have_count(1)
        for shown, upto in ((5, 12), (11, 18), (17, None)):
            expect(articles(page, "Spark AI Agent").last).to_contain_text(f"word{shown} ")
            hold.release(upto)
    finally:
        hold.release()
    stored = wait_for(lambda: last_reply_text(db, user.uid, conv))
    reply = articles(page, "Spark AI Agent").last
    expect(reply).to_have_attribute("data-status", "complete")
    shot(page, "02-reply-streamed")
    renders = [r for r in page.evaluate("window.__renders") if r]
    # Three stages, each shown before the next was let go: several partial renders.
    assert len(renders) >= 3, renders
    assert normal(renders[-1]) == normal(stored) == normal("".join(words))
    assert all(normal(stored).startswith(normal(r)) for r in renders), renders
    on_phone(page, "reply-streamed", reply)


def test_web_a_tool_step_shows_then_folds_into_done_1_step(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    fake_openai.script(
        "web: use a skill",
        Script(
            chunks=[],
            tool_calls=[("load_skill", json.dumps({"skill": "fill-blanks"}))],
            then=Script(chunks=["The rules ", "are loaded."], delay=0.05),
        ),
    )
    page = open_page(context, web, user)
    send(page, "web: use a skill")
    conv = conversation_id(page)
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    reply = articles(page, "Spark AI Agent").last
    done = reply.get_by_role("button", name="Done (1 step)")
    expect(done).to_have_attribute("aria-expanded", "false")
    expect(reply.get_by_text("Checking fill-blanks rules")).to_be_hidden()
    done.focus()
    page.keyboard.press("Enter")  # by keyboard
    expect(done).to_have_attribute("aria-expanded", "true")
    expect(reply.get_by_text("Checking fill-blanks rules")).to_be_visible()
    expect(reply.get_by_role("img", name="done")).to_have_count(1)
    expect(reply).to_contain_text("The rules are loaded.")
    shot(page, "03-done-1-step")
    on_phone(page, "done-1-step", reply.get_by_text("Checking fill-blanks rules"))


def test_web_a_question_is_answered_through_its_cards(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    questions = {
        "questions": [
            {
                "header": "Year group",
                "question": "Which year group is it for?",
                "options": [{"label": "Year 7"}, {"label": "Year 9"}],
            },
            {
                "header": "Length",
                "question": "How long should it be?",
                "options": [
                    {"label": "20 minutes", "description": "A short starter"},
                    {"label": "One hour"},
                ],
            },
        ]
    }
    fake_openai.script(
        "web: ask me",
        Script(
            chunks=["Two questions first."],
            tool_calls=[("ask_user_question", json.dumps(questions))],
            then=Script(chunks=["Thanks, a Year 9 lesson of an hour."]),
        ),
    )
    page = open_page(context, web, user)
    send(page, "web: ask me")
    conv = conversation_id(page)
    # By keyboard only: each answer moves the focus to the next card's first button.
    page.get_by_role("button", name="Year 9").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="20 minutes")).to_be_focused()
    shot(page, "04-question-card")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="One hour")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Continue")).to_be_focused()
    page.keyboard.press("Enter")
    expect(articles(page, "Spark AI Agent").last).to_contain_text(
        "Thanks, a Year 9 lesson of an hour."
    )
    stored = wait_for(lambda: last_reply_text(db, user.uid, conv))
    assert stored == "Thanks, a Year 9 lesson of an hour."
    # The hidden result (the answers as the model reads them) is never shown.
    expect(page.get_by_text('"answers"')).to_have_count(0)
    expect(page.locator("section.question")).to_have_count(0)
    doc = conversation_doc(db, user.uid, conv) or {}
    results = [
        p["toolResult"] for m in doc["messages"] for p in m["content"] if p["type"] == "tool_result"
    ]
    assert json.loads(results[0]["outputJson"])["answers"][0]["answer"] == ["Year 9"]
    on_phone(page, "question-answered", articles(page, "Spark AI Agent").last)


def test_web_an_approval_survives_a_reload_and_is_approved(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    fake_openai.script(
        "web: delete it",
        Script(
            chunks=["I need your approval."],
            tool_calls=[("delete_lesson", json.dumps({"lessonId": "lesson_gone"}))],
            then=Script(chunks=["Done with that."]),
        ),
    )
    page = open_page(context, web, user)
    send(page, "web: delete it")
    conv = conversation_id(page)
    panel = page.get_by_role("region", name="Waiting for your approval")
    expect(panel.get_by_role("button", name="Approve")).to_be_visible()
    expect(panel).to_contain_text("delete_lesson")
    expect(panel).to_contain_text("lesson_gone")
    page.reload()
    expect(panel.get_by_role("button", name="Deny")).to_be_visible()
    shot(page, "05-approval")
    on_phone(page, "approval", panel)  # and approved on a phone
    panel.get_by_role("button", name="Approve").click()
    expect(panel).to_be_hidden()
    expect(articles(page, "Spark AI Agent").last).to_contain_text("Done with that.")
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    doc = conversation_doc(db, user.uid, conv) or {}
    calls = [
        p["toolCall"] for m in doc["messages"] for p in m["content"] if p["type"] == "tool_call"
    ]
    assert calls[0]["status"] != "awaiting_approval"


def test_web_a_reload_mid_reply_shows_the_same_text_continuing(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    words = [f"tide{n} " for n in range(30)]
    # Held after six words until the reloaded page shows the reply still streaming.
    hold = Hold(at=6)
    fake_openai.script("web: reload me", Script(chunks=words, hold=hold))
    page = open_page(context, web, user)
    try:
        send(page, "web: reload me")
        conv = conversation_id(page)
        reply = articles(page, "Spark AI Agent").last
        expect(reply).to_contain_text("tide5 ")
        page.reload()
        expect(reply).to_have_attribute("data-status", "streaming")
        expect(reply).to_contain_text("tide5 ")
        before = normal(reply.locator(".text").inner_text())
        assert before.startswith("tide0 tide1 tide2 tide3"), before
    finally:
        hold.release()
    stored = wait_for(lambda: last_reply_text(db, user.uid, conv))
    expect(reply).to_have_attribute("data-status", "complete")
    assert normal(reply.locator(".text").inner_text()) == normal(stored) == normal("".join(words))
    on_phone(page, "reload-continued", reply)


def test_web_two_tabs_send_at_once_one_runs_the_other_queues(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    # Whichever send wins, its reply is held until the other is seen queued in both tabs.
    hold = Hold(at=0)
    fake_openai.script(
        "web: first tab", Script(chunks=[f"one{n} " for n in range(12)], delay=0.1, hold=hold)
    )
    fake_openai.script("web: second tab", Script(chunks=["two done."], hold=hold))
    first = open_page(context, web, user)
    send(first, "web: opening")
    conv = conversation_id(first)
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    second = context.new_page()
    second.goto(f"{web}/#/c/{conv}")
    expect(articles(second, "Spark AI Agent")).to_have_count(1)
    for page, text in ((first, "web: first tab"), (second, "web: second tab")):
        page.get_by_role("textbox", name="Message").fill(text)
    # Both clicks leave before either answer comes back.
    first.evaluate("document.getElementById('send').click()")
    second.evaluate("document.getElementById('send').click()")
    # One of them waits its turn, shown queued in both tabs at once.
    try:
        for page in (first, second):
            expect(page.locator("article[data-status=queued]")).to_have_count(1)
        shot(first, "06-two-tabs-queued")
    finally:
        hold.release()
    wait_for(lambda: (d := conversation_doc(db, user.uid, conv)) and len(d["messages"]) >= 6)
    stored = wait_for(lambda: last_reply_text(db, user.uid, conv))
    for page in (first, second):
        expect(articles(page, "Spark AI Agent")).to_have_count(3)
        expect(articles(page, "You")).to_have_count(3)
        expect(articles(page, "Spark AI Agent").last).to_contain_text(stored.strip())
    assert first.locator("#messages").inner_text() == second.locator("#messages").inner_text()
    on_phone(first, "two-tabs", articles(first, "Spark AI Agent").last)


def test_web_stop_ends_the_reply_stopped_keeping_its_text(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    # The model never gets past its third word: only the stop can end this reply.
    hold = Hold(at=3)
    fake_openai.script("web: stop me", Script(chunks=[f"slow{n} " for n in range(60)], hold=hold))
    try:
        page = open_page(context, web, user)
        send(page, "web: stop me")
        conv = conversation_id(page)
        reply = articles(page, "Spark AI Agent").last
        expect(reply).to_contain_text("slow2 ")
        stop = page.get_by_role("button", name="Stop")
        expect(stop).to_be_enabled()
        stop.click()
        expect(reply).to_have_attribute("data-status", "stopped")
    finally:
        hold.release()
    expect(reply).to_contain_text("Stopped.")
    expect(stop).to_be_disabled()
    shot(page, "07-stopped")
    ended = lambda: (d := conversation_doc(db, user.uid, conv)) and "activeRun" not in d and d  # noqa: E731
    doc = wait_for(ended)
    last = doc["messages"][-1]
    assert last["status"] == "stopped"
    text = "".join(p.get("text", "") for p in last["content"] if p["type"] == "text")
    assert text.startswith("slow0 slow1 slow2")
    assert normal(reply.locator(".text").inner_text()) == normal(text)
    on_phone(page, "stopped", reply)


def test_web_an_image_is_uploaded_attached_and_shown(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
    tmp_path: Path,
) -> None:
    user = new_user(emulators[1])
    image = tmp_path / "My homework.png"
    image.write_bytes(png_with_gps())
    page = open_page(context, web, user)
    page.get_by_label("Attach an image or PDF").set_input_files(str(image))
    expect(page.get_by_role("button", name="Remove My homework.png")).to_be_visible()
    send(page, "web: here is my homework")
    conv = conversation_id(page)
    mine = articles(page, "You").last
    shown = mine.get_by_role("img", name="My homework.png")
    expect(shown).to_be_visible()
    wait_for(lambda: shown.evaluate("i => i.complete && i.naturalWidth > 0"))
    # Upright (EXIF orientation 6): 80 wide, 120 high, as the server normalised it.
    assert shown.evaluate("i => [i.naturalWidth, i.naturalHeight]") == [80, 120]
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    shot(page, "08-image")
    doc = conversation_doc(db, user.uid, conv) or {}
    part = next(p for p in doc["messages"][0]["content"] if p["type"] == "image")
    assert part["file"]["storagePath"].startswith(f"{user.uid}/uploads/")
    on_phone(page, "image", shown)


def test_web_an_xss_reply_is_inert(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    fake_openai.script(
        "web: be nasty",
        Script(
            chunks=[
                "Look: <img src=x onerror=\"window.__pwned='img'\"> ",
                "<script>window.__pwned='script'</script> ",
                "[click me](javascript:window.__pwned='link') ",
                '<a href="javascript:window.__pwned=1">raw</a> **bold**',
            ]
        ),
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, web, user)
    send(page, "web: be nasty")
    conv = conversation_id(page)
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    reply = articles(page, "Spark AI Agent").last
    expect(reply.locator("strong")).to_have_text("bold")
    for link in reply.locator("a").all():
        link.click()  # nothing runs, whatever was clicked
    assert page.evaluate("window.__pwned") is None
    html = reply.inner_html()
    assert "onerror" not in html and "<script" not in html and "javascript:" not in html
    assert reply.locator("[onerror], script").count() == 0
    # And had something slipped through, the policy forbids inline script.
    policy = page.request.get(web + "/").headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert errors == []
    shot(page, "09-xss-inert")
    on_phone(page, "xss-inert", reply)


def test_web_axe_finds_no_serious_or_critical_violation(
    functions: Functions,
    web: str,
    browser: Browser,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    """The sign-in page, a conversation with a folded tool step, and the family panel
    of a parent with an invite link (``audit``, under the page's own policy), and the
    last on a phone."""
    user = new_user(emulators[1])
    fake_openai.script(
        "web: audit me",
        Script(
            chunks=["A **reply** with a [link](https://example.com)."],
            tool_calls=[("load_skill", json.dumps({"skill": "fill-blanks"}))],
            then=Script(chunks=["Rules read."]),
        ),
    )
    made = person(browser)
    try:
        page = made.new_page()
        page.goto(web + "/")
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        found = audit(page)
        sign_in(page, web, user)
        send(page, "web: audit me")
        conv = conversation_id(page)
        wait_for(lambda: last_reply_text(db, user.uid, conv))
        expect(page.get_by_role("button", name="Done (1 step)")).to_be_visible()
        found += audit(page)
        # The family panel as a parent sees it: members, an invite link, the opt-out.
        panel = make_family(page, "The Auditors")
        panel.get_by_role("button", name="Create invite link").click()
        expect(panel.get_by_role("textbox", name="Invite link")).to_be_visible()
        found += audit(page)
        on_phone(page, "family-invite", panel, pane="Family and editor")
    finally:
        made.close()
    assert found == [], json.dumps(found, indent=1)


def audit(page: Page, axe: Path = AXE) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is. axe is evaluated
    through the browser's own protocol, which the page's script policy does not govern,
    so the page is audited as it runs (no bypassed policy needed)."""
    page.evaluate(axe.read_text() + "\n;0")
    result = page.evaluate("async () => (await axe.run(document)).violations")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["html"][:120] for n in v["nodes"]]}
        for v in result
        if v["impact"] in ("serious", "critical")
    ]


def test_web_the_page_answers_get_editor_selection_from_its_editor(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    fake_openai.script(
        "web: what did I select?",
        Script(
            chunks=["Let me look."],
            tool_calls=[("get_editor_selection", "{}")],
            then=Script(chunks=["You selected a cat."]),
        ),
    )
    page = open_page(context, web, user)
    editor = page.get_by_role("textbox", name="Your text")
    editor.fill("The cat sat on the mat.")
    editor.evaluate("e => e.setSelectionRange(4, 7)")
    send(page, "web: what did I select?")
    conv = conversation_id(page)
    expect(articles(page, "Spark AI Agent").last).to_contain_text("You selected a cat.")
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    doc = conversation_doc(db, user.uid, conv) or {}
    results = [
        p["toolResult"] for m in doc["messages"] for p in m["content"] if p["type"] == "tool_result"
    ]
    assert json.loads(results[0]["outputJson"])["selection"] == "cat"
    expect(page.get_by_text("Reading your selection")).to_be_hidden()  # folded: Done (1 step)
    on_phone(page, "editor", editor, pane="Family and editor")


def test_web_a_task_shows_its_section_and_the_lesson_its_preview(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    user = new_user(emulators[1])
    script_lesson(
        fake_openai,
        "web: a lesson on tides",
        "tides in the web client",
        Script(chunks=["<lesson><h1>Tides</h1><p>The sea ", "rises twice a day.</p></lesson>"]),
    )
    page = open_page(context, web, user)
    send(page, "web: a lesson on tides")
    conv = conversation_id(page)
    expect(articles(page, "Spark AI Agent").last).to_contain_text("Your lesson is ready.")
    wait_for(lambda: last_reply_text(db, user.uid, conv))
    first = articles(page, "Spark AI Agent").first
    first.get_by_role("button", name="Done (1 step)").click()
    section = first.get_by_role("region", name="Task:")
    expect(section).to_contain_text("completed")
    lesson = page.get_by_role("region", name="Lesson: Tides")
    expect(lesson).to_contain_text("The sea rises twice a day.")
    shot(page, "10-task-and-lesson")
    on_phone(page, "task-and-lesson", section)


def test_web_earlier_messages_are_paged_from_the_archive(
    functions: Functions,
    web: str,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    """An api whose live document holds 16 KiB (and 4 messages of history) rolls the
    oldest messages into the archive; the page shows only the live ones until asked."""
    user = new_user(emulators[1])
    small = extra_api(functions, SPARK_LIVE_DOC_BYTES="16384", SPARK_HISTORY_MESSAGES="4")
    try:
        conv = None
        for n in range(8):
            text = f"web: archive {n}"
            fake_openai.script(text, Script(chunks=[f"Reply {n}. " + "long " * 700]))
            body: dict[str, Any] = {"text": text, **({"conversationId": conv} if conv else {})}
            with httpx.stream(
                "POST",
                f"{small.url}/api/spark/agent/messages",
                json=body,
                headers=auth(user),
                timeout=30,
            ) as response:
                assert response.status_code == 200
                events = [e for e in read_events(response) if isinstance(e, SseEvent)]
            conv = events[0].data["conversationId"]
    finally:
        small.stack.stop()
    doc = conversation_doc(db, user.uid, str(conv)) or {}
    assert doc.get("archived", {}).get("segments", 0) >= 1, "nothing rolled over"
    page = open_page(context, web, user)
    page.goto(f"{web}/#/c/{conv}")
    expect(articles(page, "Spark AI Agent").last).to_contain_text("Reply 7.")
    mine = articles(page, "You")
    expect(mine.first).not_to_contain_text("web: archive 0")
    earlier = page.get_by_role("button", name="Earlier messages")
    while earlier.is_visible():
        earlier.click()
        page.wait_for_timeout(200)
    expect(mine).to_have_count(8)
    expect(mine.first).to_contain_text("web: archive 0")
    on_phone(page, "earlier-messages", mine.first)


def family_mirror(db: firestore.Client, uid: str) -> dict[str, Any] | None:
    return db.document(f"{uid}/client/family/current").get().to_dict()


def reads_family(db: firestore.Client, uid: str) -> bool | None:
    found = db.document(f"{uid}/client/settings/current").get().to_dict()
    return None if found is None else bool(found["aiReadsFamilyMessages"])


def test_web_offers_no_new_family_before_it_knows_of_none(
    web: str, context: BrowserContext, emulators: tuple[str, str]
) -> None:
    """Until the family mirror's first snapshot the page cannot know whether the user is
    in a family, so it offers neither "Create family" nor a join: one made at once after
    signing in could be written while the listener was still being set up, and went
    unheard (this file's family test timed out so, twice). Seen where it is decided: in
    the very task that says "Signed in as", no snapshot can have come yet."""
    user = new_user(emulators[1])
    page = context.new_page()
    page.add_init_script(
        """
        window.__offered = null;
        new MutationObserver(() => {
          const who = document.getElementById("who");
          if (window.__offered === null && who && who.textContent.startsWith("Signed in as")) {
            window.__offered = !document.getElementById("family-create").hidden;
          }
        }).observe(document, { subtree: true, childList: true, characterData: true });
        """
    )
    sign_in(page, web, user)
    assert page.evaluate("window.__offered") is False
    panel = page.get_by_role("region", name="Family")
    expect(panel.get_by_role("button", name="Create family")).to_be_visible()  # once heard
    on_phone(page, "no-family", panel, pane="Family and editor")


def test_web_a_family_is_made_joined_and_written_to(
    functions: Functions,
    web: str,
    browser: Browser,
    context: BrowserContext,
    emulators: tuple[str, str],
    db: firestore.Client,
) -> None:
    """A parent makes a family and an invite link in the panel; a second user opens the
    link, signs in and joins; the parent writes to the family and the other member
    sees it, authored by the parent, from Firestore; a direct message comes back; the
    opt-out flips the member's settings mirror; the parent removes the member, then
    leaves. Each browser context is one person (Firebase keeps one user per origin)."""
    parent, child = new_user(emulators[1]), new_user(emulators[1])
    mum = open_page(context, web, parent)
    panel = make_family(mum, "The Testers", "Mum", enter=True)  # by keyboard
    members = panel.get_by_role("list", name="Members")
    expect(members).to_contain_text("Mum (you) parent")
    assert (family_mirror(db, parent.uid) or {}).get("myRole") == "parent"
    panel.get_by_role("combobox", name="Invite someone as").select_option("dependent")
    panel.get_by_role("button", name="Create invite link").click()
    link = panel.get_by_role("textbox", name="Invite link")
    expect(link).to_have_value(re.compile(r"/join\?token=[A-Za-z0-9_-]{40,}$"))
    token = str(link.input_value()).split("/join?token=", 1)[1]
    shot(mum, "11-family-invite")

    other = person(browser)
    try:
        sam = open_page(other, web, child, path=f"/join?token={token}")
        invited = sam.get_by_role("region", name="Family")
        expect(invited).to_contain_text("You have been invited to join a family.")
        invited.get_by_role("textbox", name="Your name in the family").fill("Sam")
        invited.get_by_role("button", name="Join family").click()
        expect(sam.get_by_role("region", name="Family: The Testers")).to_be_visible()
        expect(invited.get_by_role("list", name="Members")).to_contain_text("Sam (you) dependent")
        expect(sam).to_have_url(f"{web}/")  # the used token leaves the address bar
        expect(members).to_contain_text("Sam dependent")  # the parent's mirror followed
        shot(sam, "12-family-joined")

        # The parent writes to the whole family; Sam's page shows it, authored by Mum.
        panel.get_by_role("button", name="Message the family").click()
        expect(mum.get_by_role("heading", name="The Testers (family messages)")).to_be_visible()
        send(mum, 'Dinner at **six**, <img src=x onerror="window.__pwned=1">')
        family_conv = conversation_id(mum)
        assert family_conv.startswith("fc_")
        expect(articles(mum, "You")).to_contain_text("Dinner at six")
        sam.get_by_role("link", name="The Testers, family messages").click()
        from_mum = articles(sam, "Mum")
        expect(from_mum).to_contain_text("Dinner at six")
        expect(from_mum.locator("strong")).to_have_text("six")
        assert sam.evaluate("window.__pwned") is None
        assert from_mum.locator("[onerror]").count() == 0
        copy = conversation_doc(db, child.uid, family_conv) or {}
        assert copy["kind"] == "family"
        assert copy["messages"][-1]["author"]["displayName"] == "Mum"
        shot(sam, "13-family-message")

        # A direct message back, started from the member list.
        invited.get_by_role("button", name="Message Mum").click()
        expect(sam.get_by_role("heading", name="Mum (direct messages)")).to_be_visible()
        send(sam, "See you then.")
        direct = conversation_id(sam)
        assert direct.startswith("dm_")
        mum.get_by_role("link", name="Sam, direct messages").click()
        expect(articles(mum, "Sam")).to_contain_text("See you then.")
        expect(mum.get_by_role("button", name="Stop")).to_be_hidden()
        shot(mum, "14-direct-message")

        # The opt-out: the box flips the settings mirror, and shows it after a reload.
        opt = invited.get_by_role("checkbox", name="Let Spark AI Agent read my family messages")
        expect(opt).to_be_checked()
        opt.press("Space")  # by keyboard
        wait_for(lambda: reads_family(db, child.uid) is False)
        sam.reload()
        expect(opt).not_to_be_checked()
        opt.click()
        wait_for(lambda: reads_family(db, child.uid) is True)
        expect(opt).to_be_checked()

        # A parent removes a member; then leaves, the family ending with them.
        mum.once("dialog", lambda dialog: dialog.accept())
        panel.get_by_role("button", name="Remove Sam").click()
        expect(invited.get_by_role("button", name="Create family")).to_be_visible()
        expect(sam.get_by_role("link", name="Mum, direct messages")).to_be_visible()  # kept
        assert family_mirror(db, child.uid) is None
        mum.once("dialog", lambda dialog: dialog.accept())
        panel.get_by_role("button", name="Leave family").click()
        expect(panel.get_by_role("button", name="Create family")).to_be_visible()
        assert family_mirror(db, parent.uid) is None
        on_phone(sam, "direct-message", articles(sam, "You").last)
    finally:
        other.close()
