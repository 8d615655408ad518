"""Every model call passes the same per-user admission, whatever starts it (issue 18,
defects 2 and 3): a new message, a queued one, a follow-up to task results, an answer,
an approval, a client tool's result, its timeout; and the tokens task tools spend count
against the day.

A provider that counts the model calls under way at once shows what a user would
notice: with one run slot, two replies never stream together, and a reply refused
waits where the user sees it, or ends with a ``rate_limited`` error they read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from shared.agent.waiting.people import Resumed
from shared.budget.allowance import UserLimits, admit_run, release_run, spend
from shared.clock import ManualClock
from shared.errors import RateLimited, SlotsTaken, StoreError, ToolError
from shared.llm.base import (
    Finish,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ToolCallRequest,
)
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Conversation, Lesson, Usage
from shared.schemas.server import TaskLedger
from shared.schemas.tasks import TASK_PAYLOAD, ExpireTask
from shared.store.memory import InMemoryConversationStore
from shared.tools.base import Tool, ToolContext, ToolRegistry
from shared.tools.lessons import create_lesson_tool, plan_lessons_tool
from shared.tools.people import (
    ask_user_question_tool,
    delete_lesson_tool,
    get_editor_selection_tool,
)
from tests.unit.helpers import ALICE, Fakes, Harness, egress_of, make_service
from tests.unit.test_lesson_tools import DRAFT
from tests.unit.test_people import QUESTION

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPENT = "today's allowance"


@dataclass
class Gauge(ScriptedProvider):
    """A scripted model that counts its calls under way at once (``most``); ``hold``
    makes the next call wait until the event it returns is set."""

    in_flight: int = 0
    most: int = 0
    held: asyncio.Event | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def hold(self) -> asyncio.Event:
        self.held = asyncio.Event()
        self.started.clear()
        return self.held

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self.started.set()
        try:
            held, self.held = self.held, None
            if held is not None:
                await held.wait()
            async for event in super().stream(request):
                yield event
        finally:
            self.in_flight -= 1


class Topic(BaseModel):
    topic: str


async def quick(args: Topic, context: ToolContext) -> str:
    return f"A lesson on {args.topic}"


def tools(fakes: Fakes) -> ToolRegistry:
    return ToolRegistry(
        [
            ask_user_question_tool(),
            get_editor_selection_tool(),
            delete_lesson_tool(fakes.lessons),
            Tool("make_lesson", "Make a lesson.", Topic, "Creating lesson", quick, "task"),
        ]
    )


def call(name: str, args: str = "{}", usage: Usage | None = None) -> Step:
    return Step([ToolCallRequest("c", name, args), Finish("tool_calls", usage or Usage())])


def costly(text: str, usage: Usage) -> Step:
    return Step([TextDelta(text), Finish("stop", usage)])


async def deliver(service: Harness) -> None:
    """Deliver every task the queue holds, as Cloud Tasks would, until none is left
    (watchdogs and client-call timeouts are due much later: left in the queue)."""
    handler, queue, later = service.handler(), service.fakes.queue, []
    while tasks := queue.take():
        for task in tasks:
            if task.name.startswith(("watch-", "expire-")):
                later.append(task)
            else:
                await handler.handle(TASK_PAYLOAD.validate_json(task.body))
    queue.tasks = later


async def stored(service: Harness, conversation_id: str) -> Conversation:
    conversation = await service.store.get("alice", conversation_id)
    assert conversation is not None
    return conversation


async def until_streaming(gauge: Gauge) -> None:
    """Until the held call has started (``hold`` was called before it)."""
    await gauge.started.wait()


def pending_call(conversation: Conversation) -> str:
    (call_id,) = [p.tool_call.id for p in conversation.messages[-1].content if p.tool_call]
    return call_id


# -- one run slot: never two replies at once, whichever door starts the second --------

Door = Callable[[Harness, str], Awaitable[object]]


async def queued_message(service: Harness, gauge: Gauge) -> str:
    """A conversation whose queued message's run is open, waiting for its task."""
    held = gauge.hold()
    run = await service.start(ALICE, "first")
    live = asyncio.create_task(run.execute())
    await until_streaming(gauge)
    await service.agent.send(ALICE, "second", run.conversation_id, when_busy="queue")
    held.set()
    await live
    return run.conversation_id


async def paused(service: Harness, text: str) -> str:
    """A conversation whose run ended with a call waiting (or a task queued)."""
    run = await service.start(ALICE, text)
    await run.execute()
    return run.conversation_id


async def produce_queued(service: Harness, conversation_id: str) -> None:
    await deliver(service)


async def answer(service: Harness, conversation_id: str) -> Resumed:
    call_id = pending_call(await stored(service, conversation_id))
    good = {"0": "Year 5", "1": "Tides"}
    return await service.agent.answer("alice", conversation_id, call_id, good, background=False)


async def answer_later(service: Harness, conversation_id: str) -> Resumed:
    call_id = pending_call(await stored(service, conversation_id))
    good = {"0": "Year 5", "1": "Tides"}
    resumed = await service.agent.answer("alice", conversation_id, call_id, good, background=True)
    await deliver(service)
    return resumed


async def approve(service: Harness, conversation_id: str) -> Resumed:
    call_id = pending_call(await stored(service, conversation_id))
    people = service.agent
    resumed = await people.decide(
        "alice", conversation_id, call_id, approved=True, reason=None, background=False
    )
    await deliver(service)
    return resumed


async def deny(service: Harness, conversation_id: str) -> Resumed:
    call_id = pending_call(await stored(service, conversation_id))
    people = service.agent
    return await people.decide(
        "alice", conversation_id, call_id, approved=False, reason="keep it", background=False
    )


async def client_result(service: Harness, conversation_id: str) -> Resumed:
    call_id = pending_call(await stored(service, conversation_id))
    people = service.agent
    return await people.submit_result(
        "alice", conversation_id, call_id, {"text": "x"}, ok=True, background=False
    )


async def expire(service: Harness, conversation_id: str) -> None:
    call_id = pending_call(await stored(service, conversation_id))
    task = ExpireTask(
        user_id="alice", conversation_id=conversation_id, tool_call_id=call_id, after_seconds=300
    )
    await service.handler().handle(task)
    await deliver(service)


DOORS: dict[str, tuple[Step | None, Door]] = {
    # name: (the step that pauses the other conversation, what starts its reply)
    "queued message": (None, produce_queued),
    "task follow-up": (call("make_lesson", '{"topic": "tides"}'), produce_queued),
    "answer": (call("ask_user_question", QUESTION), answer),
    "answer, 202": (call("ask_user_question", QUESTION), answer_later),
    "approval": (call("delete_lesson", '{"lessonId": "lesson_1"}'), approve),
    "denial": (call("delete_lesson", '{"lessonId": "lesson_1"}'), deny),
    "client tool result": (call("get_editor_selection"), client_result),
    "client tool timeout": (call("get_editor_selection"), expire),
}


@pytest.mark.parametrize("door", list(DOORS))
async def test_with_one_run_slot_no_door_starts_a_second_reply_at_once(door: str) -> None:
    pause, start = DOORS[door]
    first = [Step.reply("one")] if pause is None else [pause]
    gauge = Gauge([*first, Step.reply("a"), Step.reply("b")])
    fakes = Fakes()
    await fakes.lessons.create(
        "alice",
        Lesson(
            id="lesson_1",
            title="Tides",
            body="<lesson><h1>Tides</h1></lesson>",
            version=1,
            created_at=NOW,
            updated_at=NOW,
        ),
    )
    service = make_service(gauge, fakes=fakes, tools=tools(fakes), runs_per_user=1)
    if pause is None:
        other = await queued_message(service, gauge)
    else:
        other = await paused(service, "the other conversation")

    held = gauge.hold()  # another conversation takes the user's only slot meanwhile
    busy = await service.start(ALICE, "meanwhile")
    live = asyncio.create_task(busy.execute())
    await until_streaming(gauge)
    outcome = await start(service, other)
    if isinstance(outcome, Resumed) and outcome.run is not None:
        await outcome.run.execute()

    assert gauge.most == 1, "two replies were written at once"
    waiting = (await stored(service, other)).active_run
    assert waiting is not None and waiting.status == "queued"
    assert "starts as soon as" in (waiting.waiting_for or "")  # the user sees why

    held.set()
    await live  # its slot frees: the waiting reply is handed to a task at once
    await deliver(service)

    after = await stored(service, other)
    assert after.active_run is None
    assert (after.messages[-1].role, after.messages[-1].text) == ("assistant", "b")
    assert gauge.most == 1
    ledger = await fakes.ledger.get("alice")
    assert ledger.runs == {} and ledger.waiting == {}


async def test_a_waiting_reply_is_produced_by_its_watchdog_if_its_wake_up_is_lost() -> None:
    gauge = Gauge([call("make_lesson", '{"topic": "tides"}'), Step.reply("a"), Step.reply("b")])
    fakes = Fakes()
    service = make_service(
        gauge,
        fakes=fakes,
        tools=tools(fakes),
        runs_per_user=1,
        run_lease_seconds=1,
        watchdog_grace_seconds=0,
    )
    other = await paused(service, "make a lesson")
    held = gauge.hold()
    busy = await service.start(ALICE, "meanwhile")
    live = asyncio.create_task(busy.execute())
    await until_streaming(gauge)
    await deliver(service)  # the task runs; its follow-up waits for the slot
    fakes.queue.failing = True  # the wake-up, as the slot frees, is lost
    held.set()
    await live
    fakes.queue.failing = False
    waiting = (await stored(service, other)).active_run
    assert waiting is not None and waiting.status == "queued"

    await asyncio.sleep(1.1)  # its lease lapses: its own watchdog produces it
    handler = service.handler()
    for task in [t for t in fakes.queue.take() if t.name.startswith("watch-")]:
        await handler.handle(TASK_PAYLOAD.validate_json(task.body))
    after = await stored(service, other)
    assert after.active_run is None and after.messages[-1].text == "b"
    assert gauge.most == 1
    ledger = await fakes.ledger.get("alice")
    assert ledger.runs == {} and ledger.waiting == {}


# -- the daily token budget ------------------------------------------------------------


@pytest.mark.leaves_steps("the budget refuses the calls these steps would answer")
async def test_queued_messages_stop_at_the_daily_budget_each_with_a_rate_limited_reply() -> None:
    # 1,100 tokens a reply, against a budget of 1,000
    spend = Usage(input_tokens=600, output_tokens=500)
    gauge = Gauge([costly(f"reply {n}", spend) for n in range(6)])
    fakes = Fakes()
    service = make_service(gauge, fakes=fakes, daily_tokens_per_user=1000)
    held = gauge.hold()
    run = await service.start(ALICE, "first")
    live = asyncio.create_task(run.execute())
    await until_streaming(gauge)
    for n in range(5):
        await service.agent.send(ALICE, f"queued {n}", run.conversation_id, when_busy="queue")
    held.set()
    await live
    await deliver(service)

    ledger = await fakes.ledger.get("alice")
    assert ledger.usage is not None and ledger.usage.tokens == 1100  # not 6,600
    conversation = await stored(service, run.conversation_id)
    users = [m.text for m in conversation.messages if m.role == "user"]
    assert users == ["first", *(f"queued {n}" for n in range(5))]  # none lost
    replies = [m for m in conversation.messages if m.role == "assistant"]
    assert [m.status for m in replies] == ["complete"] + ["error"] * 5
    for reply in replies[1:]:
        assert reply.error is not None and reply.error.code == "rate_limited"
        assert SPENT in reply.error.message
    assert conversation.active_run is None and not conversation.queued_messages
    assert ledger.runs == {}


@pytest.mark.leaves_steps("the budget refuses the call this step would answer")
async def test_a_follow_up_past_the_daily_budget_ends_with_a_rate_limited_reply() -> None:
    steps = [
        call("make_lesson", '{"topic": "tides"}', Usage(input_tokens=600, output_tokens=500)),
        Step.reply("Made."),
    ]
    gauge = Gauge(steps)
    fakes = Fakes()
    service = make_service(gauge, fakes=fakes, tools=tools(fakes), daily_tokens_per_user=1000)
    conversation_id = await paused(service, "make a lesson")
    await deliver(service)

    conversation = await stored(service, conversation_id)
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    result = conversation.messages[2].content[0].tool_result
    assert result is not None and result.status == "ok"  # the task's work is kept
    follow = conversation.messages[-1]
    assert follow.status == "error" and follow.error is not None
    assert (follow.error.code, SPENT in follow.error.message) == ("rate_limited", True)
    assert len(gauge.requests) == 1 and conversation.active_run is None
    ledger = await fakes.ledger.get("alice")
    assert ledger.usage is not None and ledger.usage.tokens == 1100
    assert ledger.runs == {}


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.leaves_steps("the budget refuses the call this step would answer")
async def test_an_answer_past_the_daily_budget_is_kept_and_the_reply_says_why(
    background: bool,
) -> None:
    gauge = Gauge(
        [
            call("ask_user_question", QUESTION, Usage(input_tokens=600, output_tokens=500)),
            Step.reply("Ok."),
        ]
    )
    fakes = Fakes()
    service = make_service(gauge, fakes=fakes, tools=tools(fakes), daily_tokens_per_user=1000)
    conversation_id = await paused(service, "plan")
    call_id = pending_call(await stored(service, conversation_id))
    good = {"0": "Year 5", "1": "Tides"}
    resumed = await service.agent.answer(
        "alice", conversation_id, call_id, good, background=background
    )
    if resumed.run is not None:
        await resumed.run.execute()
    await deliver(service)

    conversation = await stored(service, conversation_id)
    result = conversation.messages[2].content[0].tool_result
    assert result is not None and result.status == "ok"  # the answer is kept
    follow = conversation.messages[-1]
    assert follow.error is not None and follow.error.code == "rate_limited"
    assert len(gauge.requests) == 1
    assert (await fakes.ledger.get("alice")).runs == {}


async def test_a_new_message_past_the_daily_budget_is_refused_and_nothing_is_written() -> None:
    gauge = Gauge([costly("Long.", Usage(input_tokens=600, output_tokens=500))])
    service = make_service(gauge, daily_tokens_per_user=1000)
    run = await service.start(ALICE, "use it up")
    await run.execute()
    writes = dict(service.store.writes)
    with pytest.raises(RateLimited) as refused:
        await service.agent.send(ALICE, "more", run.conversation_id, when_busy="queue")
    assert SPENT in refused.value.message and dict(service.store.writes) == writes


# -- one commit: a send's admission and its message land together (issue 25) -----------


class Unwritable(InMemoryConversationStore):
    """A conversation store whose every write fails, as a commit Firestore refuses."""

    def put(self, *args: Any, **kwargs: Any) -> None:
        raise StoreError("Firestore write failed: unavailable")

    async def create(self, *args: Any, **kwargs: Any) -> None:
        raise StoreError("Firestore write failed: unavailable")


async def test_a_send_whose_message_is_not_written_writes_no_admission_either() -> None:
    """The admission and the message are one commit: the ledger is never written for a
    message that was not (before: the slot was taken, then freed, two more commits)."""
    fakes = Fakes(Unwritable())
    service = make_service(Gauge([]), fakes=fakes)
    with pytest.raises(StoreError):
        await service.agent.send(ALICE, "hi", None)
    # Only its head start's reservation, given back as it was cancelled unanswered.
    assert fakes.ledger.writes == 2
    assert await fakes.ledger.get("alice") == TaskLedger()


async def test_a_send_is_one_write_of_the_ledger_and_a_queued_one_none() -> None:
    gauge = Gauge([Step.reply("One.")])
    service = make_service(gauge)
    run = await service.start(ALICE, "one")
    # The head start's reservation (the egress's meter), then the slot with the message.
    assert service.fakes.ledger.writes == 2
    assert (await service.fakes.ledger.get("alice")).runs[run.conversation_id].run_id == (
        run.record.run_id
    )
    sent = await service.agent.send(ALICE, "two", run.conversation_id, when_busy="queue")
    assert sent.queued and service.fakes.ledger.writes == 2  # it took no slot, freed none
    await run.execute()


# -- tokens spent inside task tools ----------------------------------------------------


def drafted(text: str, usage: Usage) -> Step:
    return Step([TextDelta(text), Finish("stop", usage)])


async def test_tokens_spent_inside_task_tools_count_against_the_day() -> None:
    inner = Usage(input_tokens=100_000, output_tokens=10_000)
    plan = json.dumps({"lessons": [{"title": f"Tides {n}", "focus": "x"} for n in range(3)]})
    args = {"topic": "tides", "audience": "Year 5", "count": 3}
    steps = [
        Step(
            [
                ToolCallRequest("c", "plan_lessons", json.dumps(args)),
                Finish("tool_calls", Usage(input_tokens=10, output_tokens=10)),
            ]
        ),
        drafted(plan, inner),
        *(drafted(DRAFT, inner) for _ in range(3)),
        drafted("Three lessons are ready.", Usage(input_tokens=10, output_tokens=10)),
    ]
    provider = ScriptedProvider(steps)
    fakes = Fakes()
    service = make_service(provider, fakes=fakes)
    conversation_id = await paused(service, "plan three lessons on tides")
    await deliver(service)

    assert (await stored(service, conversation_id)).messages[-1].text == "Three lessons are ready."
    ledger = await fakes.ledger.get("alice")
    assert ledger.usage is not None and ledger.usage.tokens == 40 + 4 * 110_000


async def test_a_task_past_the_daily_budget_calls_no_model_and_fails_saying_why() -> None:
    brief = json.dumps({"topic": "tides", "audience": "Year 5"})
    steps = [
        Step(
            [
                ToolCallRequest("c", "create_lesson", brief),
                Finish("tool_calls", Usage(input_tokens=600, output_tokens=500)),
            ]
        )
    ]
    provider = ScriptedProvider(steps)
    fakes = Fakes()
    service = make_service(provider, fakes=fakes, daily_tokens_per_user=1000)
    conversation_id = await paused(service, "make a lesson on tides")
    await deliver(service)

    assert len(provider.requests) == 1  # neither the draft nor a follow-up reached it
    conversation = await stored(service, conversation_id)
    result = conversation.messages[2].content[0].tool_result
    assert result is not None and result.status == "error"
    assert SPENT in json.loads(result.output_json)["error"]
    follow = conversation.messages[-1]
    assert follow.error is not None and follow.error.code == "rate_limited"
    ledger = await fakes.ledger.get("alice")
    assert [t.status for t in ledger.tasks.values()] == ["failed"]
    assert fakes.lessons._documents == {}


@dataclass
class Meter:
    """Records what a tool spent, and refuses once ``budget`` is spent."""

    budget: int = 10**9
    spent: list[int] = field(default_factory=list)

    reserved: list[int] = field(default_factory=list)

    async def reserve(self, tokens: int, kind: str) -> str:
        if sum(self.spent) >= self.budget:
            raise RateLimited("You have used today's allowance of Spark AI Agent.", 60)
        self.reserved.append(tokens)
        return f"r{len(self.reserved)}"

    async def settle(self, reservation: str, tokens: int) -> None:
        self.spent.append(tokens)


async def test_a_plan_stops_at_the_budget_between_two_model_calls() -> None:
    inner = Usage(input_tokens=100, output_tokens=10)
    plan = json.dumps({"lessons": [{"title": f"Tides {n}", "focus": "x"} for n in range(3)]})
    provider = ScriptedProvider([drafted(plan, inner), drafted(DRAFT, inner)])
    fakes = Fakes()
    tool = plan_lessons_tool(fakes.lessons, egress_of(provider), ManualClock(), "Write.", "Plan.")
    meter = Meter(budget=200)
    context = ToolContext("alice", "conv1", "call_1", meter=meter)
    with pytest.raises(ToolError, match=SPENT):
        await tool.run(tool.args(topic="tides", audience="Year 5", count=3), context)
    assert meter.spent == [110, 110]  # the third call never started


async def test_a_tools_model_call_reserves_first_and_counts_what_the_model_reported() -> None:
    provider = ScriptedProvider([drafted("Hello", Usage(input_tokens=7, output_tokens=5))])
    meter = Meter()
    request = ModelRequest(system="s", messages=[])
    assert await egress_of(provider).complete("alice", request, "The text", meter) == "Hello"
    assert len(meter.reserved) == 1 and meter.reserved[0] > 12  # the reply's allowance
    assert meter.spent == [12]


async def test_create_lesson_counts_its_draft_and_its_repair() -> None:
    provider = ScriptedProvider(
        [
            drafted("<lesson><div/></lesson>", Usage(input_tokens=50, output_tokens=50)),
            drafted(DRAFT, Usage(input_tokens=60, output_tokens=40)),
        ]
    )
    fakes = Fakes()
    tool = create_lesson_tool(fakes.lessons, egress_of(provider), ManualClock(), "Write.")
    meter = Meter()
    context = ToolContext("alice", "conv1", "call_1", meter=meter)
    await tool.run(tool.args(topic="tides", audience="Year 5"), context)
    assert meter.spent == [100, 100]


# -- the ledger's slots, pure ----------------------------------------------------------


ONE = UserLimits(runs_at_once=1, daily_tokens=1000)


def test_a_conversations_slot_is_given_back_by_its_last_run_not_its_first() -> None:
    ledger, refused = admit_run(TaskLedger(), "run_a", "c1", NOW, ONE)
    # The follow-up opens as run_a ends, before run_a gives its place back: it joins.
    ledger, refused = admit_run(ledger, "run_f", "c1", NOW, ONE)
    assert refused is None and ledger.runs["c1"].members == ["run_a", "run_f"]
    ledger, _ = release_run(ledger, "run_a", NOW, 0, ONE)
    with pytest.raises(SlotsTaken):  # run_f still holds the only slot
        admit_run(ledger, "run_b", "c2", NOW, ONE)
    ledger, _ = release_run(ledger, "run_f", NOW, 0, ONE)
    assert ledger.runs == {}
    ledger, refused = admit_run(ledger, "run_b", "c2", NOW, ONE)
    assert refused is None and list(ledger.runs) == ["c2"]


def test_a_run_refused_a_slot_waits_first_come_first_woken() -> None:
    ledger, _ = admit_run(TaskLedger(), "run_a", "c1", NOW, ONE)
    later = NOW + timedelta(seconds=1)
    ledger, refused = admit_run(ledger, "run_b", "c2", NOW, ONE, wait=True)
    ledger, _ = admit_run(ledger, "run_c", "c3", later, ONE, wait=True)
    again, refused_again = admit_run(ledger, "run_b", "c2", later, ONE, wait=True)
    assert isinstance(refused, SlotsTaken) and isinstance(refused_again, SlotsTaken)
    # Tried again, it keeps its place; each refusal is a write (judged on the store).
    assert (again.waiting["c2"].since, again.waiting["c2"].tries) == (NOW, 2)
    with pytest.raises(SlotsTaken):  # a new message is refused, and never waits
        admit_run(ledger, "run_d", "c4", later, ONE)

    ledger, woken = release_run(again, "run_a", later, 120, ONE)
    assert woken == [("c2", "run_b")]  # one slot free: the oldest waiting run
    assert ledger.usage is not None and ledger.usage.tokens == 120
    ledger, refused = admit_run(ledger, "run_b", "c2", later, ONE, wait=True)
    assert refused is None and list(ledger.waiting) == ["c3"]
    ledger, woken = release_run(ledger, "run_c", later, 0, ONE)  # run_c ended elsewhere
    assert woken == [] and ledger.waiting == {}


def test_a_run_refused_for_the_days_tokens_never_waits_and_nothing_is_written() -> None:
    spent = spend(TaskLedger(), NOW, 1000)
    with pytest.raises(RateLimited) as refused:
        admit_run(spent, "run_a", "c1", NOW, ONE, wait=True)
    assert not isinstance(refused.value, SlotsTaken) and SPENT in refused.value.message
    tomorrow = NOW + timedelta(days=1)
    ledger, refused_then = admit_run(spent, "run_a", "c1", tomorrow, ONE)
    assert refused_then is None and list(ledger.runs) == ["c1"]
