"""The egress's meter (DESIGN §13): every model call reserves from its user's day before
it is made, a run's each step as a task tool's each call, and settles what it used after;
calls racing near the budget cannot carry the day past it by more than one call's
reservation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable
from typing import ClassVar

import pytest
from pydantic import BaseModel

from shared.budget.allowance import spend
from shared.errors import RateLimited, ToolError
from shared.llm.base import (
    ChatMessage,
    Finish,
    ModelEvent,
    ModelRequest,
    ProviderName,
    TextDelta,
    ToolCallRequest,
)
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Usage
from shared.schemas.server import TaskLedger
from shared.tools.base import Tool, ToolContext, ToolRegistry
from tests.unit.helpers import ALICE, Harness, make_service

DAILY = 50_000


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


class LongDrafts:
    """A model whose every reply waits for ``gate``, then is a long draft of
    ``output_tokens`` (more than a short reply's allowance); it records each request."""

    provider: ClassVar[ProviderName] = "scripted"
    label = "long-drafts"

    def __init__(self, output_tokens: int) -> None:
        self.output_tokens = output_tokens
        self.requests: list[ModelRequest] = []
        self.gate = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.requests.append(request)
        await self.gate.wait()
        yield TextDelta("<lesson>…</lesson>")
        yield Finish("stop", Usage(input_tokens=100, output_tokens=self.output_tokens))


async def spent_before(harness: Harness, tokens: int) -> None:
    def change(ledger: TaskLedger) -> tuple[TaskLedger, None]:
        return spend(ledger, harness.deps.clock.now(), tokens), None

    await harness.fakes.ledger.apply("alice", change)


async def tokens_today(harness: Harness) -> int:
    usage = (await harness.fakes.ledger.get("alice")).usage
    return usage.tokens if usage is not None else 0


async def test_concurrent_drafter_calls_near_the_budget_stay_within_it() -> None:
    model = LongDrafts(output_tokens=10_000)
    harness = make_service(model, daily_tokens_per_user=DAILY)
    await spent_before(harness, 20_000)
    egress = harness.deps.model
    request = ModelRequest(system="Write a lesson.", messages=[ChatMessage("user", "Tides")])
    calls = [
        asyncio.create_task(egress.complete("alice", request, "The lesson draft")) for _ in range(8)
    ]
    refused = lambda: sum(1 for c in calls if c.done() and c.exception() is not None)  # noqa: E731
    await until(lambda: len(model.requests) + refused() == len(calls))
    model.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)

    assert all(isinstance(r, str | ToolError) for r in results)
    made = [r for r in results if isinstance(r, str)]
    assert made and len(made) == len(model.requests)
    # Each call set its own bound aside: those that raced past the budget were refused
    # before they left, so the day passes its budget by one call's reservation at most.
    (bound,) = {r.max_tokens for r in model.requests}
    assert bound is not None and model.output_tokens <= bound
    assert await tokens_today(harness) <= DAILY + bound


class Topic(BaseModel):
    topic: str


async def look(args: Topic, context: ToolContext) -> str:
    return f"Notes on {args.topic}."


STEP_USAGE = Usage(input_tokens=60, output_tokens=40)


def looking(n: int) -> Step:
    """A model step that asks for one more look (a run would go on for every step)."""
    call = ToolCallRequest(f"c{n}", "look", json.dumps({"topic": f"t{n}"}))
    return Step([call, Finish("tool_calls", STEP_USAGE)])


@pytest.mark.leaves_steps
async def test_three_runs_with_one_token_left_pass_the_budget_by_one_step_at_most() -> None:
    gate = asyncio.Event()

    class Held(ScriptedProvider):
        """Each step answers once the test lets it: the first run's first step is in
        flight while the other two are admitted."""

        async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
            await gate.wait()
            async for event in super().stream(request):
                yield event

    provider = Held([looking(n) for n in range(30)])
    tool = Tool("look", "Look something up.", Topic, "Looking", look, "inline")
    harness = make_service(
        provider, tools=ToolRegistry([tool]), daily_tokens_per_user=1000, runs_per_user=3
    )
    await spent_before(harness, 999)
    runs = [await harness.start(ALICE, f"look into {n}") for n in range(3)]  # all admitted
    gate.set()
    await asyncio.gather(*(run.execute() for run in runs))

    # Each model call reserved before it left: the first took the last token, so no
    # other step of any run was made, and the day passed its budget by that one step.
    assert len(provider.requests) == 1
    assert await tokens_today(harness) == 999 + STEP_USAGE.input_tokens + STEP_USAGE.output_tokens
    stored = [await harness.store.get("alice", run.conversation_id) for run in runs]
    errors = [m.error.code for c in stored if c for m in c.messages if m.error is not None]
    assert errors.count("rate_limited") == 3  # each run ends saying why


async def test_a_user_without_budget_sends_no_head_start() -> None:
    provider = ScriptedProvider([])
    harness = make_service(provider, daily_tokens_per_user=1000)
    await spent_before(harness, 1000)
    with pytest.raises(RateLimited):
        await harness.agent.send(ALICE, "one more", None)
    assert provider.requests == []  # nothing reached the provider's wire
