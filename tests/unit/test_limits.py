"""Per-user limits (OWASP API4 / LLM10): runs at once, a daily token budget, task calls
per step, tasks waiting per user, and a history bounded in size as well as count."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from shared.agent.prompt.history import build_history, to_chat
from shared.agent.stream.events import DoneEvent, TaskQueuedEvent, ToolEndEvent
from shared.agent.stream.transcript import Frame
from shared.errors import RateLimited
from shared.llm.base import Finish, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import ContentPart, Message, Usage
from shared.tools.base import Tool, ToolContext, ToolRegistry
from tests.unit.helpers import ALICE, Fakes, make_service, run_frames, until


async def test_a_user_may_have_only_so_many_runs_at_once_across_conversations() -> None:
    gate = asyncio.Event()

    class Held(ScriptedProvider):
        async def stream(self, request):  # type: ignore[no-untyped-def, override]
            await gate.wait()
            async for event in super().stream(request):
                yield event

    service = make_service(
        Held([Step.reply("a"), Step.reply("b"), Step.reply("c")]), runs_per_user=2
    )
    first = await service.start(ALICE, "one")
    second = await service.start(ALICE, "two")
    with pytest.raises(RateLimited) as refused:
        await service.start(ALICE, "three")
    assert refused.value.status == 429 and refused.value.retry_after >= 1
    assert "wait for one to finish" in refused.value.message
    writes = sum(service.store.writes.values())
    gate.set()
    await asyncio.gather(first.execute(), second.execute())
    third = await service.start(ALICE, "three, again")  # a slot is free now
    await third.execute()
    assert sum(service.store.writes.values()) > writes


async def test_the_daily_token_budget_refuses_with_retry_after_midnight() -> None:
    steps = [
        Step(
            [
                *Step.reply("Long.").events[:-1],
                Finish("stop", Usage(input_tokens=600, output_tokens=500)),
            ]
        )
    ]
    service = make_service(ScriptedProvider(steps), daily_tokens_per_user=1000)
    await run_frames(service, ALICE, "use it up")
    with pytest.raises(RateLimited) as refused:
        await service.start(ALICE, "more please")
    assert "today's allowance" in refused.value.message
    assert 0 < refused.value.retry_after <= 24 * 3600 + 1


class Topic(BaseModel):
    topic: str


async def quick(args: Topic, context: ToolContext) -> str:
    return args.topic


async def test_task_calls_past_the_step_limit_become_errors_the_model_sees() -> None:
    calls = [ToolCallRequest(f"c{n}", "make", json.dumps({"topic": str(n)})) for n in range(4)]
    fakes = Fakes()
    tool = Tool("make", "Make.", Topic, "Making", quick, "task")
    service = make_service(
        ScriptedProvider([Step([*calls, Finish("tool_calls")])]),
        fakes=fakes,
        tools=ToolRegistry([tool]),
        task_calls_per_step=3,
    )
    _, frames = await run_frames(service, ALICE, "four lessons")
    queued = [f for f in frames if isinstance(f.event, TaskQueuedEvent)]
    refused = [f.event for f in frames if isinstance(f.event, ToolEndEvent)]
    assert len(queued) == 3 and len(refused) == 1
    assert "At most 3 background tasks" in (refused[0].error or "")
    assert isinstance(frames[-1].event, DoneEvent) and frames[-1].event.status == "queued"
    assert len((await fakes.ledger.get("alice")).tasks) == 3


async def test_tasks_waiting_per_user_are_bounded() -> None:
    fakes = Fakes()
    tool = Tool("make", "Make.", Topic, "Making", quick, "task")
    steps = [
        Step([ToolCallRequest("c", "make", json.dumps({"topic": str(n)})), Finish("tool_calls")])
        for n in range(3)
    ]
    service = make_service(
        ScriptedProvider(steps),
        fakes=fakes,
        tools=ToolRegistry([tool]),
        tasks_queued_per_user=2,
        tasks_per_user=1,
    )
    for n in range(2):
        _, frames = await run_frames(service, ALICE, f"lesson {n}")
        assert isinstance(frames[-1].event, DoneEvent)
    _, frames = await run_frames(service, ALICE, "one too many")
    last = frames[-1].event
    assert last.type == "error" and last.code == "rate_limited"  # type: ignore[union-attr]
    assert len((await fakes.ledger.get("alice")).tasks) == 2


def test_history_is_bounded_in_size_oldest_first_keeping_calls_with_results() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)

    def msg(n: int, role: str, text: str) -> Message:
        return Message(
            id=f"m{n}",
            role=role,
            created_at=now,
            status="complete",  # type: ignore[arg-type]
            content=[ContentPart.of_text(text)],
        )

    messages = [msg(n, "user" if n % 2 == 0 else "assistant", "z" * 1000) for n in range(10)]
    full = to_chat(messages)
    cut = build_history(messages, 20, max_chars=3500)
    assert len(cut) == 3 and cut == full[-3:]
    assert sum(len(t.text) for t in cut) <= 3500
    # However tight, the latest user message (and what answers it) stays.
    assert build_history(messages, 20, max_chars=10) == full[-2:]


def test_history_cut_never_starts_with_a_result_nor_drops_the_question() -> None:
    from shared.llm.base import ChatMessage, ToolCallRequest

    chat = [
        ChatMessage("user", "u" * 100),
        ChatMessage("assistant", "", tool_calls=(ToolCallRequest("c1", "t", "{}"),)),
        ChatMessage("tool", "r" * 5000, tool_call_id="c1", name="t"),
    ]
    from shared.agent.prompt import history

    original = history.to_chat
    history.to_chat = lambda *_: chat  # type: ignore[assignment]
    try:
        cut = history.build_history([], 20, max_chars=50)
    finally:
        history.to_chat = original
    assert [t.role for t in cut] == ["user", "assistant", "tool"]


async def test_a_slot_is_freed_however_the_run_ends() -> None:
    service = make_service(ScriptedProvider([Step.reply("late", delay=5)]), runs_per_user=1)
    queued = await service.agent.send(ALICE, "in the background", None, background=True)
    await service.agent.stop("alice", queued.conversation_id)  # closed at once: freed
    run = await service.start(ALICE, "another conversation")
    frames: list[Frame] = []
    task = asyncio.create_task(run.execute(frames.append))
    await until(lambda: bool(frames), "the run to start")  # mid-reply: the model is slow
    task.cancel()  # the process shuts down mid-reply: freed on the way out
    with pytest.raises(asyncio.CancelledError):
        await task
    third = await service.start(ALICE, "a third one")  # a slot is free: no 429
    assert third.conversation_id
