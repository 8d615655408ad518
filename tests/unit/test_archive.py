"""Roll-over on fakes: the live document stays within its budget, every message is
readable exactly once, calls keep their results, and the model's history is unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from shared.agent.prompt.history import build_history
from shared.agent.run.runs import close_stale_run, new_run
from shared.agent.stream.transcript import CUT_NOTE
from shared.llm.base import Finish, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import ArchiveSegment, ContentPart, Conversation, Message
from shared.store.archive import claim, drop, live_size, plan
from shared.store.memory import InMemoryConversationStore
from shared.tools.base import Tool, ToolContext, ToolRegistry
from tests.unit.helpers import ALICE, make_service, run_frames

BUDGET = 20_000
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def messages_of(count: int, size: int, user: Callable[[int], bool]) -> list[Message]:
    return [
        Message(
            id=f"m{n}",
            role="user" if user(n) else "assistant",
            created_at=NOW,
            status="complete",
            content=[ContentPart.of_text("x" * size)],
        )
        for n in range(count)
    ]


def live_of(messages: list[Message] | None = None, **fields: Any) -> Conversation:
    return Conversation(
        id="c",
        participant_ids=["u"],
        created_at=NOW,
        updated_at=NOW,
        last_message_at=NOW,
        messages=messages or [],
        **fields,
    )


class Args(BaseModel):
    n: int


async def echo(args: Args, context: ToolContext) -> str:
    return "echo " * 50


def readable(conversation: Conversation, segments: list) -> list[str]:  # type: ignore[type-arg]
    """Every message a client can read, in order: the segments the marker counts, then
    the live document (a segment past the marker is a move under way: skipped)."""
    counted = conversation.archived.segments if conversation.archived else 0
    ids = [m.id for s in segments if s.segment <= counted for m in s.messages]
    return ids + [m.id for m in conversation.messages]


async def test_long_conversation_rolls_over_and_reads_back_whole() -> None:
    turns = 60
    steps = []
    for n in range(turns):
        if n % 5 == 0:
            steps += [
                Step([ToolCallRequest("t", "echo", json.dumps({"n": n})), Finish("tool_calls")]),
                Step.reply(f"Reply {n} after a tool. " + "words " * 60),
            ]
        else:
            steps.append(Step.reply(f"Reply {n}. " + "words " * 60))
    provider = ScriptedProvider(steps)
    store = InMemoryConversationStore()
    tools = ToolRegistry([Tool("echo", "Echo.", Args, "Echoing", echo)])
    service = make_service(provider, store, tools=tools, live_doc_bytes=BUDGET)
    conversation_id = None
    histories = []
    for n in range(turns):
        conversation_id, _ = await run_frames(service, ALICE, f"message {n}", conversation_id)
        live = await store.get("alice", conversation_id)
        assert live is not None
        assert live_size(live) <= BUDGET + 8_000  # one turn over at most, before it moves
        histories.append([m.text for m in build_history(live.messages, 20)])
    live = await store.get("alice", conversation_id)
    assert live is not None and live.archived is not None and live.archived.segments >= 2
    segments = await store.segments("alice", conversation_id)
    ids = readable(live, segments)
    assert len(ids) == len(set(ids)) == turns * 2  # each user message and its reply
    assert live.archived.count == len(ids) - len(live.messages)
    # Calls and results never split: each live result's call is live too.
    calls = {p.tool_call.id for m in live.messages for p in m.content if p.tool_call}
    results = {
        p.tool_result.tool_call_id for m in live.messages for p in m.content if p.tool_result
    }
    assert results <= calls
    # The model saw a whole history on the last turn (no orphans, no pending notes).
    last = provider.requests[-1].messages
    assert last[-1].role == "user" and last[-1].text == f"message {turns - 1}"
    assert all("pending" not in m.text for m in last if m.role == "tool")


def test_a_move_that_died_half_way_reads_each_message_once_and_is_redone() -> None:
    now = NOW
    messages = messages_of(30, 2000, lambda n: n % 2 == 0)
    live = live_of(messages)
    claimed, number, moving = claim(live, BUDGET, 20, now, now + timedelta(seconds=60))
    assert number == 1 and moving and len(live.messages) - len(moving) >= 20
    # A second move of the same conversation meanwhile finds the claim and does nothing.
    assert claim(claimed, BUDGET, 20, now, now + timedelta(seconds=60))[2] == []
    orphan = ArchiveSegment(conversation_id="c", segment=1, messages=moving, created_at=now)
    # Step 1 landed, step 2 did not: the marker counts no segment yet.
    assert readable(claimed, [orphan]) == [m.id for m in messages]
    moved = drop(claimed, [m.id for m in moving], 1)
    assert moved.archived is not None and moved.archiving is None
    assert readable(moved, [orphan]) == [m.id for m in messages]
    # Redone (or raced) with stale ids: nothing changes.
    assert drop(moved, [m.id for m in moving], 1) is moved
    # A claim whose move died is taken over once it lapses.
    later = now + timedelta(seconds=61)
    assert claim(claimed, BUDGET, 20, later, later + timedelta(seconds=60))[1] == 1


@pytest.mark.parametrize("keep", [20, 25])
def test_plan_keeps_the_latest_user_message_and_the_history_window(keep: int) -> None:
    live = live_of(messages_of(40, 3000, lambda n: n == 3))
    assert [m.id for m in plan(live, BUDGET, keep)] == ["m0", "m1", "m2"]


def test_a_dead_run_closed_in_a_full_document_keeps_a_note_instead_of_its_text() -> None:
    now = NOW
    run = new_run("r", "m", now, now, None)
    assert run.message is not None
    streaming = run.message.model_copy(update={"content": [ContentPart.of_text("x" * 50_000)]})
    live = live_of(active_run=run.model_copy(update={"message": streaming}))
    later = now + timedelta(seconds=1)
    closed = close_stale_run(live, later, later, cut=True)
    message = closed.messages[-1]
    assert closed.active_run is None and message.status == "error"
    assert message.text == CUT_NOTE
