"""The AI SDK's chat routes driven by its own ``DefaultChatTransport`` and its own chat
(the ``ai`` package that package-lock.json pins, in Node: tests/ai_sdk/transport.mjs and
chat.mjs), on two api and two tasks processes: every chunk is validated by the AI SDK as
it reads it, and what the chat shows is what Firestore holds."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import threading
from collections.abc import Callable
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
from tests.e2e.test_people import QUESTION, make_lesson
from tests.e2e.test_tasks import LESSON_ARGS, brief
from tests.fakes.openai_server import FakeOpenAI, Hold, Script
from tests.samples import png_with_gps

pytestmark = pytest.mark.emulator

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/api/spark/agent/chat"
NODE_NET_SECONDS = 300


def node(
    script: str,
    functions: Functions,
    user: StackUser,
    opened: Callable[[], None] | None = None,
    **given: Any,
) -> Any:
    """What ``tests/ai_sdk/<script>`` printed (JSON), run with the chat route, ``user``'s
    token and ``given``; ``opened`` is called once the script says its (first) stream is
    open (``open`` on stderr): the server has answered, so a held model may go on."""
    given = {"api": functions.api + CHAT, "token": user.token, **given}
    process = subprocess.Popen(
        ["node", str(ROOT / "tests" / "ai_sdk" / script), json.dumps(given)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None and process.stderr is not None
    said: list[str] = []

    def listen(lines: Any, told: Callable[[], None] | None) -> None:
        for line in lines:  # (its own thread: stdout is read meanwhile, never blocked)
            said.append(line)
            if told is not None and line.startswith("open"):
                told()
                told = None

    listener = threading.Thread(target=listen, args=(process.stderr, opened), daemon=True)
    listener.start()
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.append(process.stdout.read()), daemon=True)
    reader.start()
    # A net, not a verdict: a stream that never ends fails here instead of hanging.
    reader.join(NODE_NET_SECONDS)
    if reader.is_alive():
        process.kill()
        raise AssertionError(f"{script} still running after {NODE_NET_SECONDS} s: {said}")
    out = printed[0]
    process.wait(timeout=90)
    listener.join(10)
    assert process.returncode == 0, "".join(said)
    return json.loads(out)


def transport(
    functions: Functions,
    user: StackUser,
    opened: Callable[[], None] | None = None,
    **request: Any,
) -> dict[str, Any]:
    """What the AI SDK's transport read: ``{message, chunks}`` (``message`` None: 204)."""
    read: dict[str, Any] = node("transport.mjs", functions, user, opened, **request)
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

    reply: dict[str, Any] = wait_for(rest)
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
    # Held after ten words until the resume (a Node process) has its stream open: it
    # finds the reply being written however slow the machine.
    hold = Hold(at=10)
    fake_openai.script("ai sdk slow", Script(chunks=words, hold=hold))
    chat_id = "chat_" + secrets.token_hex(6)
    sent, sender = sending(functions, alice, chat_id, "ai sdk slow")

    def writing() -> bool:
        # Some of it written already: the resume replays it, then follows.
        doc = conversation_doc(db, alice.uid, chat_id) or {}
        draft = (doc.get("activeRun") or {}).get("message") or {}
        return any(p.get("text") for p in draft.get("content", []))

    try:
        wait_for(writing)
        resumed = transport(functions, alice, opened=hold.release, action="resume", chatId=chat_id)
    finally:
        hold.release()
    sender.join(60)
    assert text_of(resumed["message"]) == text_of(sent["message"]) == "".join(words)
    # One text part, begun once: the replay and the live rest are not two copies.
    assert resumed["chunks"].count("text-start") == 1
    assert resumed["message"]["id"] == sent["message"]["id"]


def test_e2e_a_stop_ends_the_chat_for_its_listener_with_abort(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    words = [f" w{n}" for n in range(200)]
    # The model never gets past its twentieth word: only the stop can end this chat.
    hold = Hold(at=20)
    fake_openai.script("ai sdk stop me", Script(chunks=words, hold=hold))
    chat_id = "chat_" + secrets.token_hex(6)
    try:
        sent, sender = sending(functions, alice, chat_id, "ai sdk stop me")
        hold.wait_held()
        stop = httpx.post(
            functions.api + conversation_path(chat_id, "stop"),
            headers=auth(alice, sse=False),
            timeout=30,
        )
        assert stop.status_code in (200, 202), stop.text
        sender.join(60)
    finally:
        hold.release()
    assert "abort" in sent["chunks"]
    stored = stored_reply(db, alice.uid, chat_id)
    assert stored["status"] == "stopped"
    assert text_of(sent["message"]).startswith(stored_text(stored)[:10])


# --- a chat as a front end holds it: the AI SDK's own Chat (tests/ai_sdk/chat.mjs) -----


def chat(
    functions: Functions,
    user: StackUser,
    chat_id: str,
    messages: Any,
    opened: Callable[[], None] | None = None,
    **action: Any,
) -> Any:
    """One thing a person does in a fresh AI SDK ``Chat`` holding ``messages``: what it
    shows after it (``messages``), and the chunk types of each request it made."""
    return node(
        "chat.mjs", functions, user, opened, chatId=chat_id, messages=messages, action=action
    )


def _state(call: dict[str, Any], result: dict[str, Any] | None) -> str:
    """The state the AI SDK gives a tool part, from the stored call and its result."""
    if call["status"] == "denied":
        return "output-denied"
    if result is not None:
        return "output-available" if result["status"] == "ok" else "output-error"
    if call["status"] == "awaiting_approval":
        return "approval-requested"
    if call.get("approval"):
        return "approval-responded"
    return "input-available"


def rebuilt(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The UI messages a front end rebuilds from the stored conversation (a reload)."""
    results = {
        p["toolResult"]["toolCallId"]: p["toolResult"]
        for m in doc["messages"]
        for p in m["content"]
        if "toolResult" in p
    }
    messages: list[dict[str, Any]] = []
    for m in doc["messages"]:
        if m["role"] == "user":
            messages.append(
                {"id": m["id"], "role": "user", "parts": [{"type": "text", "text": m_text(m)}]}
            )
        if m["role"] != "assistant":
            continue
        parts: list[dict[str, Any]] = [{"type": "step-start"}]
        for p in m["content"]:
            if p["type"] == "text":
                parts.append({"type": "text", "text": p["text"], "state": "done"})
            call = p.get("toolCall")
            if call is None:
                continue
            result = results.get(call["id"])
            part = {
                "type": f"tool-{call['name']}",
                "toolCallId": call["id"],
                "input": json.loads(call["argsJson"]),
                "state": _state(call, result),
            }
            if call.get("approval"):
                decided = call["status"] != "awaiting_approval"
                approval = {"id": call["id"]}
                if decided:
                    approval["approved"] = call["status"] != "denied"
                part["approval"] = approval
            if part["state"] == "output-available":
                part["output"] = json.loads(result["outputJson"])  # type: ignore[index]
            elif part["state"] == "output-error":
                part["errorText"] = result["outputJson"]  # type: ignore[index]
            parts.append(part)
        messages.append({"id": m["id"], "role": "assistant", "parts": parts})
    return messages


def m_text(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message["content"] if p["type"] == "text")


def shown(messages: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """What a person reads, in order, wherever message boundaries fall: each message's
    words, and each tool call once, in the state it reached last."""
    items: list[list[str]] = []
    calls: dict[str, list[str]] = {}
    for m in messages:
        for p in m["parts"]:
            if p["type"] == "text":
                kind = "user" if m["role"] == "user" else "text"
                if items and items[-1][0] == kind == "text":
                    items[-1][1] += p["text"]
                else:
                    items.append([kind, p["text"]])
            elif p["type"].startswith("tool-"):
                if p["toolCallId"] in calls:
                    calls[p["toolCallId"]][3] = p["state"]
                else:
                    calls[p["toolCallId"]] = ["tool", p["type"], p["toolCallId"], p["state"]]
                    items.append(calls[p["toolCallId"]])
    return [tuple(i) for i in items]


def at_rest(db: firestore.Client, uid: str, chat_id: str, count: int) -> dict[str, Any]:
    """The conversation once no run is active and it holds ``count`` messages or more."""

    def rest() -> dict[str, Any] | None:
        doc = conversation_doc(db, uid, chat_id) or {}
        done = "activeRun" not in doc and len(doc.get("messages", [])) >= count
        return doc if done else None

    doc: dict[str, Any] = wait_for(rest, 60)
    return doc


def follow_up_streaming(db: firestore.Client, uid: str, chat_id: str) -> None:
    """Wait until a follow-up's run is being written (after its calls' results)."""

    def streaming() -> bool:
        doc = conversation_doc(db, uid, chat_id) or {}
        active = doc.get("activeRun") or {}
        return active.get("status") == "streaming" and doc["messages"][-1]["role"] == "tool"

    wait_for(streaming, 60)


SLOW_FOLLOW_UP = [f" step{n}." for n in range(30)]
"""A follow-up held after five steps until the next resume's stream is open."""


def test_e2e_a_task_tool_shows_its_section_and_its_follow_up_on_the_next_resume(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "ai sdk lesson on dunes",
        Script(
            chunks=["Creating that now."],
            tool_calls=[("create_lesson", LESSON_ARGS % "dunes")],
            then=Script(chunks=SLOW_FOLLOW_UP, hold=(hold := Hold(at=5))),
        ),
    )
    fake_openai.script(
        brief("dunes"), Script(chunks=["<lesson><h1>Dunes</h1>", "<p>Sand.</p></lesson>"])
    )
    chat_id = "chat_" + secrets.token_hex(6)
    sent = chat(functions, alice, chat_id, [], send={"text": "ai sdk lesson on dunes"})
    (asked,) = [m for m in sent["messages"] if m["role"] == "assistant"]
    (task,) = [p for p in asked["parts"] if p["type"] == "data-task"]
    (tool,) = [p for p in asked["parts"] if p["type"] == "tool-create_lesson"]
    assert task["data"]["status"] == "queued" and task["data"]["toolCallId"] == tool["toolCallId"]
    assert tool["state"] == "input-available"
    assert sent["requests"][0]["chunks"][-1] == "finish"
    # The task runs elsewhere; its follow-up is found by the next resume.
    try:
        follow_up_streaming(db, alice.uid, chat_id)
        resumed = chat(
            functions, alice, chat_id, sent["messages"], opened=hold.release, resume=True
        )
    finally:
        hold.release()
    follow_up = resumed["messages"][-1]
    assert follow_up["id"] != asked["id"]
    # It opens with the task's result, and its section in its final state, under the
    # same id as when it was queued (a part with that id replaces the earlier one).
    (ended,) = [p for p in follow_up["parts"] if p["type"] == "data-task"]
    assert ended["id"] == task["id"] and ended["data"]["status"] == "completed"
    (done,) = [p for p in follow_up["parts"] if p["type"] == "tool-create_lesson"]
    assert done["state"] == "output-available" and done["output"]["documentId"]
    assert text_of(follow_up).endswith("step29.")
    doc = at_rest(db, alice.uid, chat_id, 4)
    assert shown(resumed["messages"]) == shown(rebuilt(doc))


def test_e2e_an_approval_approved_after_a_reload_runs_the_call_and_the_reply_goes_on(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    make_lesson(db, alice.uid, "lesson_ai_sdk_ok")
    fake_openai.script(
        "ai sdk delete it for real",
        Script(
            chunks=["Let me delete it."],
            tool_calls=[("delete_lesson", '{"lessonId": "lesson_ai_sdk_ok"}')],
            then=Script(chunks=SLOW_FOLLOW_UP, hold=(hold := Hold(at=5))),
        ),
    )
    chat_id = "chat_" + secrets.token_hex(6)
    chat(functions, alice, chat_id, [], send={"text": "ai sdk delete it for real"})
    # A reload: a fresh chat whose messages are rebuilt from what the server holds.
    held = rebuilt(conversation_doc(db, alice.uid, chat_id) or {})
    (tool,) = [p for p in held[-1]["parts"] if p["type"] == "tool-delete_lesson"]
    assert tool["state"] == "approval-requested"
    approved = chat(
        functions, alice, chat_id, held, approve={"id": tool["approval"]["id"], "approved": True}
    )
    (posted,) = approved["requests"]
    assert posted["chunks"] == ["start", "start-step", "data-accepted", "finish-step", "finish"]
    # The approved call runs on a task; the reply goes on, found by the next resume.
    try:
        follow_up_streaming(db, alice.uid, chat_id)
        resumed = chat(
            functions, alice, chat_id, approved["messages"], opened=hold.release, resume=True
        )
    finally:
        hold.release()
    (resume,) = resumed["requests"]
    assert resume["chunks"][:6] == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",
    ]
    assert text_of(resumed["messages"][-1]).endswith("step29.")
    doc = at_rest(db, alice.uid, chat_id, 4)
    assert shown(resumed["messages"]) == shown(rebuilt(doc))
    assert ("tool", "tool-delete_lesson", tool["toolCallId"], "output-available") in shown(
        rebuilt(doc)
    )
    lesson = db.collection(alice.uid).document("client").collection("lessons")
    assert not lesson.document("lesson_ai_sdk_ok").get().exists


def test_e2e_a_client_tool_answered_with_add_tool_output_goes_on_in_the_same_message(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "ai sdk explain my selection",
        Script(
            chunks=[],
            tool_calls=[("get_editor_selection", "{}")],
            then=Script(chunks=["It is about tides."]),
        ),
    )
    chat_id = "chat_" + secrets.token_hex(6)
    sent = chat(functions, alice, chat_id, [], send={"text": "ai sdk explain my selection"})
    (tool,) = [p for p in sent["messages"][-1]["parts"] if p["type"] == "tool-get_editor_selection"]
    assert tool["state"] == "input-available"
    output = {"tool": "get_editor_selection", "toolCallId": tool["toolCallId"]}
    answered = chat(
        functions, alice, chat_id, sent["messages"], output={**output, "output": {"text": "Tides"}}
    )
    asked = answered["messages"][-1]
    assert asked["id"] == sent["messages"][-1]["id"]  # the reply goes on in that message
    assert text_of(asked) == "It is about tides."
    doc = at_rest(db, alice.uid, chat_id, 4)
    assert shown(answered["messages"]) == shown(rebuilt(doc))
    # The same output again is history; one for a call never made is refused.
    again = chat_post(functions, alice, chat_id, answered["messages"])
    assert again.status_code == 400, again.text
    forged = json.loads(json.dumps(answered["messages"]))
    forged[-1]["parts"] = [
        {**p, "toolCallId": "call_forged"} if p.get("toolCallId") else p
        for p in forged[-1]["parts"]
    ]
    assert chat_post(functions, alice, chat_id, forged).status_code == 404


def test_e2e_a_question_is_a_data_part_answered_as_the_calls_output(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "ai sdk ask me first",
        Script(
            chunks=[],
            tool_calls=[("ask_user_question", QUESTION)],
            then=Script(chunks=["A Year 6 ", "lesson it is."]),
        ),
    )
    chat_id = "chat_" + secrets.token_hex(6)
    sent = chat(functions, alice, chat_id, [], send={"text": "ai sdk ask me first"})
    asked = sent["messages"][-1]
    (question,) = [p for p in asked["parts"] if p["type"] == "data-question"]
    (tool,) = [p for p in asked["parts"] if p["type"] == "tool-ask_user_question"]
    assert question["id"] == tool["toolCallId"] == question["data"]["toolCallId"]
    assert question["data"]["questions"][0]["header"] == "Year"
    # An answer that is not one of the options is refused, and changes nothing.
    before = conversation_doc(db, alice.uid, chat_id)
    bad = json.loads(json.dumps(asked))
    for p in bad["parts"]:
        if p["type"] == "tool-ask_user_question":
            p.update(state="output-available", output={"0": "Year 9"})
    refused = chat_post(functions, alice, chat_id, [*sent["messages"][:-1], bad])
    assert refused.status_code == 400, refused.text
    assert conversation_doc(db, alice.uid, chat_id) == before
    # Answered as the AI SDK answers a call: its output, the labels chosen.
    output = {"tool": "ask_user_question", "toolCallId": tool["toolCallId"]}
    answered = chat(
        functions, alice, chat_id, sent["messages"], output={**output, "output": {"0": "Year 6"}}
    )
    assert text_of(answered["messages"][-1]) == "A Year 6 lesson it is."
    doc = at_rest(db, alice.uid, chat_id, 4)
    assert shown(answered["messages"]) == shown(rebuilt(doc))


def test_e2e_a_chat_file_reaches_the_model_as_an_attachment(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("ai sdk what is on this map", Script(chunks=["A coastline."]))
    png = png_with_gps()
    file = {
        "type": "file",
        "mediaType": "image/png",
        "filename": "coast map.png",
        "url": "data:image/png;base64," + base64.b64encode(png).decode(),
    }
    chat_id = "chat_" + secrets.token_hex(6)
    sent = chat(
        functions, alice, chat_id, [], send={"text": "ai sdk what is on this map", "files": [file]}
    )
    assert text_of(sent["messages"][-1]) == "A coastline."
    doc = at_rest(db, alice.uid, chat_id, 2)
    (image,) = [p for p in doc["messages"][0]["content"] if p["type"] == "image"]
    assert image["file"]["originalPath"].endswith("/coast_map.png")
    asked = fake_openai.requests_for("ai sdk what is on this map")
    assert any("image_url" in json.dumps(r) for r in asked)


def chat_post(functions: Functions, user: StackUser, chat_id: str, messages: Any) -> httpx.Response:
    return httpx.post(
        functions.api + CHAT,
        headers=auth(user, sse=False),
        json={"id": chat_id, "messages": messages, "trigger": "submit-message"},
        timeout=30,
    )


def test_e2e_the_ai_sdk_regenerate_makes_the_last_reply_again(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    chat_id = f"chat_regen_{secrets.token_hex(4)}"
    fake_openai.script(
        "regenerate in the chat", Script(chunks=["Old words."]), after=Script(chunks=["New words."])
    )
    chat(functions, alice, chat_id, [], send={"text": "regenerate in the chat"})
    doc = at_rest(db, alice.uid, chat_id, 2)
    old = doc["messages"][-1]["id"]
    # A reload holds what the server keeps; the AI SDK's regenerate() of the last reply.
    after = chat(functions, alice, chat_id, rebuilt(doc), regenerate={"messageId": old})
    assert shown(after["messages"]) == [("user", "regenerate in the chat"), ("text", "New words.")]
    assert after["requests"][0]["chunks"][0] == "start"
    doc = at_rest(db, alice.uid, chat_id, 3)
    assert [m_text(m) for m in doc["messages"][1:]] == ["Old words.", "New words."]
    assert doc["messages"][-1]["regenerates"] == old
