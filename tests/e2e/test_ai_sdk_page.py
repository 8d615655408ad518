"""A front end built on the AI SDK's ``useChat`` (``@ai-sdk/react``, the page in
``tests/ai_sdk/page/``, bundled by esbuild at test time) in Debian's Chromium under
Playwright, pointed at the chat routes through ``tools/web.py`` on one origin, on the
whole local stack (two api and two tasks processes) and the fake OpenAI server.

It shows what such a front end's users see: a streamed reply, an approval card answered
with ``addToolApprovalResponse`` (a denial, and the agent's next words), and a reply
that goes on after the page is reloaded mid-reply (``resume: true``). The page's
conversation ends as Firestore holds it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud import firestore
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e import test_web
from tests.e2e.conftest import Functions, StackUser
from tests.e2e.test_ai_sdk import stored_reply, stored_text
from tests.e2e.test_web import normal, open_page, served, shot
from tests.fakes.openai_server import FakeOpenAI, Hold, Script
from tools.web import ROOT, bundle

pytestmark = pytest.mark.emulator

PAGE = ROOT / "tests" / "ai_sdk" / "page"
# The browser test's fixtures, here on this module's page.
browser = test_web.browser
context = test_web.context


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page, built: its ``index.html``, its stylesheet and its bundle."""
    built = tmp_path_factory.mktemp("usechat-page")
    shutil.copy(PAGE / "index.html", built / "index.html")
    shutil.copy(PAGE / "app.css", built / "app.css")
    react = ["--jsx=automatic", '--define:process.env.NODE_ENV="production"']
    bundle(PAGE / "main.jsx", built / "app.js", *react)
    return built


@pytest.fixture(scope="module")
def web(functions: Functions, site: Path) -> Iterator[str]:
    with served(functions, f"--site={site}") as url:
        yield url


def chat_id(page: Page) -> str:
    chat = page.evaluate("new URL(location.href).searchParams.get('chat')")
    assert isinstance(chat, str) and chat.startswith("chat_")
    return chat


def send(page: Page, text: str) -> None:
    page.get_by_role("textbox", name="Message").fill(text)
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("article", name="You").last).to_contain_text(text)


def replies(page: Page) -> Any:
    return page.get_by_role("article", name="Spark AI Agent")


def watch_reply(page: Page) -> None:
    """Records the text of the last reply each time the page changes it."""
    page.evaluate(
        """() => {
        window.__renders = [];
        new MutationObserver(() => {
          const replies = document.querySelectorAll('article.assistant');
          const last = replies[replies.length - 1];
          const parts = last ? [...last.querySelectorAll('.text')] : [];
          const text = parts.map((p) => p.textContent).join('');
          if (window.__renders[window.__renders.length - 1] !== text) window.__renders.push(text);
        }).observe(document.body, {childList: true, subtree: true, characterData: true});
      }"""
    )


def test_usechat_a_reply_streams_onto_the_page_as_firestore_keeps_it(
    functions: Functions,
    web: str,
    context: BrowserContext,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    # Let go in stages, each once the page shows the last: it must grow on the page,
    # however fast or slow the machine (it was two seconds of paced words).
    words = [f"word{n} " for n in range(40)]
    hold = Hold(at=10)
    fake_openai.script("usechat: stream please", Script(chunks=words, hold=hold))
    page = open_page(context, web, alice, token=True)
    watch_reply(page)
    try:
        send(page, "usechat: stream please")
        for shown, upto in ((9, 20), (19, 30), (29, None)):
            expect(replies(page).first).to_contain_text(f"word{shown}")
            hold.release(upto)
    finally:
        hold.release()
    expect(replies(page)).to_have_count(1)
    expect(replies(page).first).to_contain_text("word39")
    expect(page.get_by_role("status")).to_have_text("ready")
    whole = "".join(words).strip()
    renders = page.evaluate("window.__renders")
    # It streamed: the page showed the reply growing, not all at once.
    assert len([r for r in renders if r and normal(r) != whole]) >= 3, renders
    stored = stored_reply(db, alice.uid, chat_id(page))
    shown = "".join(replies(page).first.locator(".text").all_inner_texts())
    assert normal(stored_text(stored)) == whole == normal(shown)
    assert replies(page).first.get_attribute("data-message-id") == stored["id"]


def denied(
    context: BrowserContext, web: str, user: StackUser, fake: FakeOpenAI, said: str, name: str
) -> Page:
    """The page after ``user`` asked for a lesson to be deleted, saw the approval card
    and denied it there, and the agent's next words arrived (screenshots ``name``-…)."""
    fake.script(
        said,
        Script(
            chunks=["Let me delete that lesson."],
            tool_calls=[("delete_lesson", '{"lessonId": "lesson_fractions"}')],
            then=Script(chunks=["Kept it, as you asked."]),
        ),
    )
    page = open_page(context, web, user, token=True)
    send(page, said)
    card = page.get_by_role("group", name="Tool delete_lesson")
    expect(card).to_have_attribute("data-state", "approval-requested")
    expect(card).to_contain_text("lesson_fractions")
    expect(page.get_by_role("status")).to_have_text("ready")
    shot(page, f"{name}-asked")
    card.get_by_role("button", name="Deny").click()
    # sendAutomaticallyWhen posts the denial; the agent's next words stream in.
    expect(page.get_by_text("Kept it, as you asked.")).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("ready")
    shot(page, f"{name}-denied")
    return page


def test_usechat_an_approval_card_denied_and_the_agent_goes_on(
    functions: Functions,
    web: str,
    context: BrowserContext,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    page = denied(
        context, web, alice, fake_openai, "Please delete my fractions lesson.", "ai-sdk-usechat"
    )
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("group", name="Tool delete_lesson").last).to_contain_text("Denied.")
    stored = stored_reply(db, alice.uid, chat_id(page))
    assert stored_text(stored) == "Kept it, as you asked."


def test_usechat_the_words_after_a_denial_go_on_in_the_reply_that_asked(
    functions: Functions,
    web: str,
    context: BrowserContext,
    alice: StackUser,
    fake_openai: FakeOpenAI,
) -> None:
    page = denied(
        context, web, alice, fake_openai, "Delete the fractions lesson.", "ai-sdk-usechat-again"
    )
    expect(page.get_by_text("Let me delete that lesson.")).to_have_count(1, timeout=1000)
    expect(replies(page)).to_have_count(1, timeout=1000)


def test_usechat_a_reload_mid_reply_resumes_it_without_repeating_a_word(
    functions: Functions,
    web: str,
    context: BrowserContext,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    words = [f"slow{n} " for n in range(60)]
    # Held after ten words until the reloaded page has asked for it: still being written.
    hold = Hold(at=10)
    fake_openai.script("usechat: a long one", Script(chunks=words, hold=hold))
    page = open_page(context, web, alice, token=True)
    try:
        send(page, "usechat: a long one")
        expect(replies(page).first).to_contain_text("slow9")
        url = page.url
        # The reload drops the POST's stream (a disconnect, not a stop); the new page's
        # useChat asks for the reply being written and is given it from the start.
        with page.expect_response(lambda r: r.url.endswith("/stream")) as resumed:
            page.reload()
        assert resumed.value.status == 200, "nothing was being written any more"
    finally:
        hold.release()
    assert page.url == url
    expect(replies(page).first).to_contain_text("slow59")
    expect(page.get_by_role("status")).to_have_text("ready")
    whole = "".join(words).strip()
    expect(page.get_by_role("article", name="You")).to_have_count(1)
    expect(replies(page)).to_have_count(1)
    stored = stored_reply(db, alice.uid, chat_id(page))
    assert stored["status"] == "complete"
    assert normal(stored_text(stored)) == whole
    # One text part: the replay replaced what the page kept, and the rest followed.
    (shown,) = replies(page).first.locator(".text").all_inner_texts()
    assert normal(shown) == whole
