"""The reference web client (``web/``, served by ``tools/web.py``) in a real browser:
Debian's Chromium driven by Playwright, against the whole local stack (two api and two
tasks processes, the emulators) and the fake OpenAI server.

The page renders only from Firestore listeners, so each check compares what it shows
with what Firestore holds. Screenshots of each step go to ``.stack/screenshots/``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from tests.e2e.conftest import (
    Functions,
    StackUser,
    conversation_doc,
    new_user,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Script
from tests.samples import png_with_gps
from tools.stack import Stack, free_port
from tools.web import ROOT, build

pytestmark = pytest.mark.emulator

CHROMIUM = os.environ.get("SPARK_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / ".stack" / "screenshots"
# Every wait in the page is bounded: a stuck page fails its test in seconds, not minutes.
TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def web(functions: Functions) -> Iterator[str]:
    """The web client, freshly built, served against the stack's api (as make dev does)."""
    build()
    port = free_port()
    logs = Path(os.environ.get("SPARK_STACK_LOGS") or ROOT / ".stack")
    stack = Stack(logs)
    command = [sys.executable, "-m", "tools.web", "serve", f"--port={port}"]
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
    made = browser.new_context(viewport={"width": 1280, "height": 860}, locale="en-GB")
    made.set_default_timeout(TIMEOUT_MS)
    try:
        yield made
    finally:
        made.close()


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Page, web: str, user: StackUser, password: str = "secret-123") -> None:
    """Signs in through the form, by keyboard only."""
    page.goto(web + "/")
    page.get_by_label("Email").fill(user.email)
    page.get_by_label("Password").fill(password)
    page.get_by_label("Password").press("Enter")
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()


def send(page: Page, text: str) -> None:
    box = page.get_by_role("textbox", name="Message")
    box.fill(text)
    page.get_by_role("button", name="Send").click()
    expect(box).to_have_value("")


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
    fake_openai.script("web: stream please", Script(chunks=words, delay=0.08))
    page = context.new_page()
    sign_in(page, web, user)
    shot(page, "01-signed-in")
    watch_renders(page)
    send(page, "web: stream please")
    conv = conversation_id(page)
    expect(articles(page, "You")).to_have_count(1)
    stored = wait_for(lambda: last_reply_text(db, user.uid, conv), timeout=30)
    reply = articles(page, "Spark AI Agent").last
    expect(reply).to_have_attribute("data-status", "complete")
    shot(page, "02-reply-streamed")
    renders = [r for r in page.evaluate("window.__renders") if r]
    # Throttled writes every 200 ms over ~2 s of tokens: several partial renders.
    assert len(renders) >= 3, renders
    assert normal(renders[-1]) == normal(stored) == normal("".join(words))
    assert all(normal(stored).startswith(normal(r)) for r in renders), renders
