"""The AI SDK's chat routes driven by its own ``DefaultChatTransport`` (the ``ai``
package that package-lock.json pins, in Node: tests/ai_sdk/transport.mjs), on two api
and two tasks processes: every chunk is validated by the AI SDK as it reads it, and the
message it builds is the one Firestore holds."""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import (
    Functions,
    StackUser,
    auth,
    conversation_doc,
    conversation_path,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Script

pytestmark = pytest.mark.emulator

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/api/spark/agent/chat"


def transport(functions: Functions, user: StackUser, **request: Any) -> dict[str, Any]:
    """What the AI SDK's transport read: ``{message, chunks}`` (``message`` None: 204)."""
    given = {"api": functions.api + CHAT, "token": user.token, **request}
    done = subprocess.run(
        ["node", str(ROOT / "tests" / "ai_sdk" / "transport.mjs"), json.dumps(given)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    read: dict[str, Any] = json.loads(done.stdout)
    return read


def said(user_text: str) -> list[dict[str, Any]]:
    return [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": user_text}]}]


def sending(
    functions: Functions, user: StackUser, chat_id: str, text: str
) -> tuple[dict[str, Any], threading.Thread]:
    """A chat message sent by the transport in the background: what it read, once the
    thread ends."""
    sent: dict[str, Any] = {}

    def send() -> None:
        sent.update(transport(functions, user, action="send", chatId=chat_id, messages=said(text)))

    sender = threading.Thread(target=send)
    sender.start()
    return sent, sender


def text_of(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


def stored_reply(db: firestore.Client, uid: str, chat_id: str) -> dict[str, Any]:
    """The newest assistant message, once the conversation is at rest."""

    def rest() -> dict[str, Any] | None:
        doc = conversation_doc(db, uid, chat_id) or {}
        last = (doc.get("messages") or [{}])[-1]
        if "activeRun" in doc or last.get("role") != "assistant":
            return None
        return last

    reply: dict[str, Any] = wait_for(rest, 30)
    return reply


def stored_text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["content"] if p["type"] == "text")


def test_e2e_a_chat_made_by_its_id_streams_what_firestore_keeps(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("ai sdk hello", Script(chunks=["Hello", " from", " the", " chat."]))
    chat_id = "chat_" + secrets.token_hex(6)
    read = transport(functions, alice, action="send", chatId=chat_id, messages=said("ai sdk hello"))
    message = read["message"]
    assert text_of(message) == "Hello from the chat."
    assert read["chunks"][:2] == ["start", "start-step"]
    assert read["chunks"][-2:] == ["finish-step", "finish"]
    stored = stored_reply(db, alice.uid, chat_id)
    assert message["id"] == stored["id"] and stored_text(stored) == text_of(message)
    # Nothing is being written now: the transport's resume finds nothing (204).
    assert transport(functions, alice, action="resume", chatId=chat_id)["message"] is None


def test_e2e_a_denied_approval_comes_back_in_the_next_post_and_the_agent_goes_on(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "ai sdk delete it",
        Script(
            chunks=["Let me delete it."],
            tool_calls=[("delete_lesson", '{"lessonId": "lesson_ai_sdk"}')],
            then=Script(chunks=["Kept it, as you asked."]),
        ),
    )
    chat_id = "chat_" + secrets.token_hex(6)
    asked = said("ai sdk delete it")
    first = transport(functions, alice, action="send", chatId=chat_id, messages=asked)["message"]
    (tool,) = [p for p in first["parts"] if p["type"] == "tool-delete_lesson"]
    assert tool["state"] == "approval-requested"
    # addToolApprovalResponse, as useChat sends it: the same message, its part answered.
    tool.update(state="approval-responded", approval={**tool["approval"], "approved": False})
    read = transport(functions, alice, action="send", chatId=chat_id, messages=[*asked, first])
    assert "Kept it, as you asked." in text_of(read["message"])
    stored = stored_reply(db, alice.uid, chat_id)
    assert stored_text(stored) == "Kept it, as you asked."
    # The same answer again is history, not a second decision: refused in words, 400.
    again = httpx.post(
        functions.api + CHAT,
        headers=auth(alice, sse=False),
        json={"id": chat_id, "messages": [*asked, first], "trigger": "submit-message"},
        timeout=30,
    )
    assert again.status_code == 400, again.text
    # An answer for a call the conversation never had is refused: 404, nothing done.
    forged = json.loads(json.dumps(first))
    next(p for p in forged["parts"] if p["type"] == "tool-delete_lesson")["toolCallId"] = "call_x"
    refused = httpx.post(
        functions.api + CHAT,
        headers=auth(alice, sse=False),
        json={"id": chat_id, "messages": [*asked, forged], "trigger": "submit-message"},
        timeout=30,
    )
    assert refused.status_code == 404, refused.text


def test_e2e_a_resume_on_the_other_process_replays_then_follows_without_duplicates(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    words = [f" word{n}" for n in range(40)]
    fake_openai.script("ai sdk slow", Script(chunks=words, delay=0.05))
    chat_id = "chat_" + secrets.token_hex(6)
    sent, sender = sending(functions, alice, chat_id, "ai sdk slow")
    wait_for(lambda: "activeRun" in (conversation_doc(db, alice.uid, chat_id) or {}), 20)
    time.sleep(0.5)  # some of it written already: the resume replays it, then follows
    resumed = transport(functions, alice, action="resume", chatId=chat_id)
    sender.join(60)
    assert text_of(resumed["message"]) == text_of(sent["message"]) == "".join(words)
    # One text part, begun once: the replay and the live rest are not two copies.
    assert resumed["chunks"].count("text-start") == 1
    assert resumed["message"]["id"] == sent["message"]["id"]


def test_e2e_a_stop_ends_the_chat_for_its_listener_with_abort(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    words = [f" w{n}" for n in range(200)]
    fake_openai.script("ai sdk stop me", Script(chunks=words, delay=0.05))
    chat_id = "chat_" + secrets.token_hex(6)
    sent, sender = sending(functions, alice, chat_id, "ai sdk stop me")
    wait_for(lambda: "activeRun" in (conversation_doc(db, alice.uid, chat_id) or {}), 20)
    stop = httpx.post(
        functions.api + conversation_path(chat_id, "stop"),
        headers=auth(alice, sse=False),
        timeout=30,
    )
    assert stop.status_code in (200, 202), stop.text
    sender.join(60)
    assert "abort" in sent["chunks"]
    stored = stored_reply(db, alice.uid, chat_id)
    assert stored["status"] == "stopped"
    assert text_of(sent["message"]).startswith(stored_text(stored)[:10])
