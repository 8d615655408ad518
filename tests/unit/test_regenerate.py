"""The last reply made again (DESIGN §15): ``POST .../regenerate`` and the AI SDK's
``regenerate-message``, as a send on the in-package fakes. The new reply is appended
(the old one stays) and marked ``regenerates``; the model is never sent what it
replaces; every refusal changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.agent.prompt.history import steps_since_user, to_chat
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import ContentPart, Message, ToolCall, ToolResult
from tests.unit.helpers import ALICE, Harness, api_of, make_service, serving
from tests.unit.test_tasks import deliver_all

ALICE_AUTH = {"Authorization": "Bearer alice-token"}
BOB_AUTH = {"Authorization": "Bearer bob-token"}
STREAM = {**ALICE_AUTH, "Accept": "text/event-stream"}
CONVERSATIONS = "/api/spark/agent/conversations"


async def replied(*later: Step) -> tuple[Harness, ScriptedProvider, str]:
    """Alice's conversation of "hello" and the reply "First reply.", with ``later``
    steps scripted for what the test does next."""
    provider = ScriptedProvider([Step.reply("First reply."), *later])
    service = make_service(provider)
    sent = await service.agent.send(ALICE, "hello", None)
    assert sent.run is not None
    await sent.run.execute()
    return service, provider, sent.conversation_id


def messages(service: Harness, conversation_id: str) -> list[dict[str, Any]]:
    document = service.store.document("alice", conversation_id)
    assert document is not None
    return list(document["messages"])


def said(request: Any) -> list[tuple[str, str]]:
    """A model request's turns, as (role, text)."""
    return [(turn.role, turn.text) for turn in request.messages]


async def test_regenerate_streams_a_new_reply_appended_after_the_old_one() -> None:
    service, provider, cid = await replied(Step.reply("Second reply."))
    old = messages(service, cid)[-1]["id"]
    async with serving(api_of(service)) as client:
        answer = await client.post(
            f"{CONVERSATIONS}/{cid}/regenerate", headers=STREAM, json={"messageId": old}
        )
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert "event: done" in answer.text and "Second reply." in answer.text
    stored = messages(service, cid)
    assert [(m["role"], m.get("regenerates")) for m in stored] == [
        ("user", None),
        ("assistant", None),
        ("assistant", old),
    ]
    assert stored[1]["content"][0]["text"] == "First reply."  # the old one stays
    assert stored[2]["content"][0]["text"] == "Second reply."
    assert stored[2]["status"] == "complete"
    # The model was asked the same user turn, without the reply it replaces.
    assert said(provider.requests[1]) == [("user", "hello")]


async def test_regenerate_without_a_stream_is_202_and_a_task_writes_the_reply() -> None:
    service, provider, cid = await replied(Step.reply("From a task."))
    old = messages(service, cid)[-1]["id"]
    async with serving(api_of(service)) as client:
        answer = await client.post(
            f"{CONVERSATIONS}/{cid}/regenerate", headers=ALICE_AUTH, json={"messageId": old}
        )
        assert answer.status_code == 202
        assert answer.json()["conversationId"] == cid
        await deliver_all(service, service.fakes.queue)
    stored = messages(service, cid)
    assert stored[-1]["regenerates"] == old
    assert stored[-1]["content"][0]["text"] == "From a task."
    assert said(provider.requests[1]) == [("user", "hello")]


async def test_the_conversation_goes_on_from_the_new_reply_not_the_old() -> None:
    service, provider, cid = await replied(Step.reply("Second reply."), Step.reply("On."))
    old = messages(service, cid)[-1]["id"]
    again = await service.agent.regenerate(ALICE, cid, old)
    assert again.body is not None
    body = b"".join([chunk async for chunk in again.body])  # the run, produced here
    assert b"event: done" in body
    sent = await service.agent.send(ALICE, "and then?", cid)
    assert sent.run is not None
    await sent.run.execute()
    assert said(provider.requests[2]) == [
        ("user", "hello"),
        ("assistant", "Second reply."),
        ("user", "and then?"),
    ]


def test_the_model_is_never_shown_the_replaced_reply_nor_its_tool_turns() -> None:
    at = "2026-01-01T00:00:00Z"
    call = ToolCall.model_validate(
        {
            "id": "call_1",
            "name": "load_skill",
            "argsJson": "{}",
            "displayText": "Loading",
            "execution": "inline",
            "status": "complete",
        }
    )
    result = ToolResult(tool_call_id="call_1", output_json='"the skill"', status="ok")

    def message(
        mid: str, role: str, *parts: ContentPart, regenerates: str | None = None
    ) -> Message:
        return Message.model_validate(
            {
                "id": mid,
                "role": role,
                "createdAt": at,
                "status": "complete",
                "content": [p.model_dump(by_alias=True, exclude_none=True) for p in parts],
                "regenerates": regenerates,
            }
        )

    history = [
        message("u1", "user", ContentPart.of_text("hello")),
        message(
            "a1",
            "assistant",
            ContentPart(type="tool_call", tool_call=call),
            ContentPart(type="tool_result", tool_result=result),
            ContentPart.of_text("Old reply."),
        ),
        message("a2", "assistant", ContentPart.of_text("New reply."), regenerates="a1"),
    ]
    assert [(t.role, t.text) for t in to_chat(history)] == [
        ("user", "hello"),
        ("assistant", "New reply."),
    ]
    assert steps_since_user(history) == 1  # the new reply's own step, not the old's two


async def refused_changes_nothing(
    service: Harness, cid: str, path_id: str, body: Any, headers: dict[str, str]
) -> Any:
    before = service.store.document("alice", cid)
    async with serving(api_of(service)) as client:
        answer = await client.post(
            f"{CONVERSATIONS}/{path_id}/regenerate", headers=headers, json=body
        )
    assert service.store.document("alice", cid) == before
    return answer


@pytest.mark.parametrize(
    ("which", "status"),
    [
        ("the user's message", 400),
        ("an unknown message", 400),
        ("no messageId", 400),
        ("an extra field", 400),
        ("an unknown conversation", 404),
        ("bob's request", 404),
        ("an idempotency key", 400),
    ],
)
async def test_a_refused_regenerate_changes_nothing(which: str, status: int) -> None:
    service, _, cid = await replied()
    stored = messages(service, cid)
    user_id, reply_id = stored[0]["id"], stored[1]["id"]
    path_id, body, headers = cid, {"messageId": reply_id}, dict(STREAM)
    if which == "the user's message":
        body = {"messageId": user_id}
    elif which == "an unknown message":
        body = {"messageId": "msg_nope"}
    elif which == "no messageId":
        body = {}
    elif which == "an extra field":
        body = {"messageId": reply_id, "text": "x"}
    elif which == "an unknown conversation":
        path_id = "conv_nope"
    elif which == "bob's request":
        headers = {**BOB_AUTH, "Accept": "text/event-stream"}
    else:
        headers["Idempotency-Key"] = "k1"
    answer = await refused_changes_nothing(service, cid, path_id, body, headers)
    assert answer.status_code == status, answer.text
    assert "error" in answer.json()


async def test_a_regenerate_while_a_reply_is_written_is_409_and_changes_nothing() -> None:
    service, _, cid = await replied(Step.reply("Busy."))
    old = messages(service, cid)[-1]["id"]
    sent = await service.agent.send(ALICE, "more", cid)  # its run is open, not produced yet
    assert sent.run is not None
    answer = await refused_changes_nothing(service, cid, cid, {"messageId": old}, STREAM)
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "run_in_progress"
    await sent.run.execute()
    # Once that reply is written, the old one is no longer the last: 400.
    answer = await refused_changes_nothing(service, cid, cid, {"messageId": old}, STREAM)
    assert answer.status_code == 400


async def test_the_ai_sdk_regenerate_trigger_makes_the_last_reply_again() -> None:
    service, provider, cid = await replied(Step.reply("Again."))
    old = messages(service, cid)[-1]["id"]
    chat = {
        "id": cid,
        "trigger": "regenerate-message",
        "messageId": old,
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}],
    }
    async with serving(api_of(service)) as client:
        answer = await client.post("/api/spark/agent/chat", headers=ALICE_AUTH, json=chat)
    assert answer.status_code == 200
    assert answer.headers["x-vercel-ai-ui-message-stream"] == "v1"
    chunks = [
        json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")
    ]
    assert chunks[0]["type"] == "start"
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "Again."
    assert chunks[-1]["type"] == "finish"
    stored = messages(service, cid)
    assert stored[-1]["regenerates"] == old and stored[-1]["id"] == chunks[0]["messageId"]
    assert said(provider.requests[1]) == [("user", "hello")]
