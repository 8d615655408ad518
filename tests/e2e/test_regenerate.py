"""The last reply made again, end to end (DESIGN §15): streamed and as a 202 written by
a task, on the emulators with the fake model; the old reply stays, the new one is
marked ``regenerates``, and the model is not sent the reply it replaces."""

from __future__ import annotations

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import (
    SseEvent,
    StackUser,
    auth,
    conversation_path,
    read_events,
    settled,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Script

pytestmark = pytest.mark.emulator


def first_reply(api_url: str, user: StackUser, db: firestore.Client, text: str) -> tuple[str, str]:
    """A conversation of ``text`` and its reply: its id and the reply's."""
    with httpx.stream(
        "POST",
        api_url + "/api/spark/agent/messages",
        headers=auth(user),
        json={"text": text},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        events = [e for e in read_events(response) if isinstance(e, SseEvent)]
    start = events[0].data
    wait_for(lambda: settled(db, user.uid, start["conversationId"], 2), what="the first reply")
    return start["conversationId"], start["assistantMessageId"]


def sent_for_again(fake_openai: FakeOpenAI, text: str) -> list[tuple[str, str]]:
    """What the model was sent last for ``text``, without the system prompt."""
    sent = fake_openai.requests_for(text)[-1]["messages"]
    return [(m["role"], m["content"]) for m in sent if m["role"] != "system"]


def test_e2e_regenerate_streams_a_new_reply_and_keeps_the_old(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "regenerate streamed", Script(chunks=["First try."]), after=Script(chunks=["Second try."])
    )
    cid, old = first_reply(api_url, alice, db, "regenerate streamed")
    with httpx.stream(
        "POST",
        api_url + conversation_path(cid, "regenerate"),
        headers=auth(alice),
        json={"messageId": old},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        events = [e for e in read_events(response) if isinstance(e, SseEvent)]
    assert events[0].event == "run_start" and events[-1].event == "done"
    assert "".join(e.data["content"] for e in events if e.event == "text") == "Second try."
    doc = wait_for(lambda: settled(db, alice.uid, cid, 3), what="the new reply")
    _, kept, again = doc["messages"]
    assert kept["id"] == old and kept["content"][0]["text"] == "First try."
    assert again["regenerates"] == old and again["content"][0]["text"] == "Second try."
    assert sent_for_again(fake_openai, "regenerate streamed") == [("user", "regenerate streamed")]


def test_e2e_regenerate_without_a_stream_is_written_by_a_task(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "regenerate by task", Script(chunks=["Once."]), after=Script(chunks=["Twice."])
    )
    cid, old = first_reply(api_url, alice, db, "regenerate by task")
    response = httpx.post(
        api_url + conversation_path(cid, "regenerate"),
        headers=auth(alice, sse=False),
        json={"messageId": old},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    doc = wait_for(lambda: settled(db, alice.uid, cid, 3), what="the task's reply")
    assert doc["messages"][-1]["regenerates"] == old
    assert doc["messages"][-1]["content"][0]["text"] == "Twice."
    # A second regenerate of the same reply is refused: it is no longer the last.
    again = httpx.post(
        api_url + conversation_path(cid, "regenerate"),
        headers=auth(alice, sse=False),
        json={"messageId": old},
        timeout=30,
    )
    assert again.status_code == 400
    assert len(conversation_doc_messages(db, alice.uid, cid)) == 3


def conversation_doc_messages(db: firestore.Client, uid: str, cid: str) -> list[object]:
    doc = settled(db, uid, cid, 0)
    assert doc is not None
    return list(doc["messages"])


def test_e2e_a_title_appears_after_the_first_reply(
    api_url: str, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("title me please", Script(chunks=["A reply to title."]))
    cid, _ = first_reply(api_url, alice, db, "title me please")

    def titled() -> object:
        doc = settled(db, alice.uid, cid, 2)
        return doc if doc and doc.get("titleSource") == "auto" else None

    doc = wait_for(titled, what="the automatic title")
    # The fake answers the title's request (not the conversation's script) by default.
    assert doc["title"] == "Hello from the fake"
    asked = [r for r in fake_openai.requests if "Title this conversation." in str(r["messages"])]
    assert asked and all(r.get("max_completion_tokens", r.get("max_tokens")) for r in asked)
