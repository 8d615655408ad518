"""Task tools end to end on fakes: queued by a run, delivered (and redelivered) to the
handler, results and follow-ups appended once, retries, per-user limits, 202 replies."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from shared.agent.stream.events import DoneEvent, TaskQueuedEvent
from shared.clock import ManualClock
from shared.errors import QueueUnavailable
from shared.llm.base import Finish, TextDelta, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.queue.base import QueuedTask
from shared.queue.memory import InMemoryTaskQueue
from shared.schemas.documents import Conversation
from shared.schemas.tasks import TASK_PAYLOAD
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.tools.base import Tool, ToolContext, ToolRegistry
from tests.unit.helpers import ALICE, Fakes, Harness, make_service, run_to_end


class SlowArgs(BaseModel):
    topic: str


class Flaky:
    """A task tool that fails ``failures`` times, then works; it records its runs."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.runs: list[str] = []

    async def __call__(self, args: SlowArgs, context: ToolContext) -> dict[str, str]:
        self.runs.append(context.tool_call_id)
        if len(self.runs) <= self.failures:
            raise RuntimeError("the lesson service timed out")
        return {"lesson": f"A lesson on {args.topic}"}


def task_tool(run: Any) -> Tool[SlowArgs]:
    return Tool("make_lesson", "Make a lesson.", SlowArgs, "Creating lesson", run, "task")


def calls(*names_and_ids: tuple[str, str], args: str = '{"topic": "tides"}') -> Step:
    return Step([*(ToolCallRequest(i, n, args) for n, i in names_and_ids), Finish("tool_calls")])


def fakes() -> Fakes:
    return Fakes(
        InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
        InMemoryTaskQueue(),
    )


async def when_due(task: QueuedTask) -> QueuedTask:
    """Wait, as the queue would, until the task is due."""
    if task.schedule_at is not None:
        await asyncio.sleep(max(0.0, (task.schedule_at - datetime.now(UTC)).total_seconds()))
    return task


def is_watchdog(task: QueuedTask) -> bool:
    return task.name.startswith("watch-")


def take(queue: InMemoryTaskQueue) -> list[QueuedTask]:
    """The queued tasks other than watchdogs (they are due only after a lease lapses)."""
    return [t for t in queue.take() if not is_watchdog(t)]


async def deliver_all(service: Harness, queue: InMemoryTaskQueue, times: int = 1) -> int:
    """Deliver every queued task ``times`` times (when due), until the queue is empty."""
    handler = service.handler()
    delivered = 0
    while tasks := take(queue):
        for task in tasks:
            await when_due(task)
            for _ in range(times):
                await handler.handle(TASK_PAYLOAD.validate_json(task.body))
                delivered += 1
    return delivered


async def stored(service: Harness, conversation_id: str) -> Conversation:
    conversation = await service.store.get("alice", conversation_id)
    assert conversation is not None
    return conversation


def results(conversation: Conversation) -> list[tuple[str, str, str]]:
    return [
        (p.tool_result.tool_call_id, p.tool_result.status, p.tool_result.output_json)
        for m in conversation.messages
        for p in m.content
        if p.tool_result is not None
    ]


async def test_task_tool_ends_the_stream_queued_then_the_handler_answers() -> None:
    tool = Flaky()
    provider = ScriptedProvider(
        [
            Step(
                [
                    TextDelta("On it. "),
                    ToolCallRequest("call_1", "make_lesson", '{"topic": "tides"}'),
                    Finish("tool_calls"),
                ]
            ),
            Step.reply("Your lesson on tides is ready."),
        ]
    )
    f = fakes()
    service = make_service(provider, fakes=f, tools=ToolRegistry([task_tool(tool)]))
    conversation_id, events = await run_to_end(service, ALICE, "make a lesson on tides")

    queued = [e for e in events if isinstance(e, TaskQueuedEvent)]
    assert [(e.tool, e.display_text) for e in queued] == [("make_lesson", "Creating lesson")]
    call_id = queued[0].tool_call_id
    assert isinstance(events[-1], DoneEvent) and events[-1].status == "queued"
    before = await stored(service, conversation_id)
    assert before.active_run is None
    call = before.messages[-1].content[-1].tool_call
    assert call is not None and (call.status, call.execution) == ("queued", "task")
    assert before.tasks is not None
    assert [t.status for t in before.tasks.values()] == ["queued"]

    await deliver_all(service, f.queue)

    after = await stored(service, conversation_id)
    assert tool.runs == [call_id]
    assert [(c, s) for c, s, _ in results(after)] == [(call_id, "ok")]
    assert [m.role for m in after.messages] == ["user", "assistant", "tool", "assistant"]
    assert after.messages[-1].text == "Your lesson on tides is ready."
    assert after.messages[-1].status == "complete"
    assert after.active_run is None
    assert after.tasks is not None
    assert [t.status for t in after.tasks.values()] == ["completed"]
    # The follow-up's model call saw the call and its result, paired.
    history = provider.requests[-1].messages
    assert [m.role for m in history] == ["user", "assistant", "tool"]
    assert json.loads(history[-1].text) == {"lesson": "A lesson on tides"}


async def test_task_delivered_three_times_has_one_result_and_one_follow_up() -> None:
    tool = Flaky()
    provider = ScriptedProvider([calls(("make_lesson", "call_1")), Step.reply("Done.")])
    f = fakes()
    service = make_service(provider, fakes=f, tools=ToolRegistry([task_tool(tool)]))
    conversation_id, _ = await run_to_end(service, ALICE, "lesson please")

    assert await deliver_all(service, f.queue, times=3) == 3

    after = await stored(service, conversation_id)
    assert len(tool.runs) == 1
    assert len(results(after)) == 1
    assert [m.role for m in after.messages].count("assistant") == 2


async def test_failing_task_is_retried_with_backoff_then_reported() -> None:
    tool, clock = Flaky(failures=10), ManualClock()
    provider = ScriptedProvider(
        [calls(("make_lesson", "call_1")), Step.reply("Sorry, I could not create the lesson.")]
    )
    f = fakes()
    service = make_service(
        provider,
        fakes=f,
        tools=ToolRegistry([task_tool(tool)]),
        task_max_attempts=3,
        task_retry_base_ms=200,
        clock=clock,
    )
    conversation_id, _ = await run_to_end(service, ALICE, "lesson please")
    handler = service.handler()
    delays = []
    for _ in range(3):
        (task,) = take(f.queue)
        due = task.schedule_at
        # On a clock that moves only when told: the backoff is what was asked, and a
        # delivery before it ends is early however slow the machine is.
        delays.append(0.0 if due is None else (due - clock.now()).total_seconds())
        early = await handler.handle(TASK_PAYLOAD.validate_json(task.body))
        if due is not None:
            assert early == "busy"  # delivered before its backoff ended
            await clock.advance(delays[-1])
            await handler.handle(TASK_PAYLOAD.validate_json(task.body))
    assert take(f.queue) == []
    assert delays == [0.0, 0.2, 0.4]

    after = await stored(service, conversation_id)
    assert len(tool.runs) == 3
    ((_, status, output),) = results(after)
    assert status == "error" and "did not work after 3 attempts" in output
    assert after.messages[-1].text == "Sorry, I could not create the lesson."
    assert after.tasks is not None
    assert [t.status for t in after.tasks.values()] == ["failed"]
    ledger = await f.ledger.get("alice")
    assert [r.status for r in ledger.tasks.values()] == ["failed"]


async def test_fourth_task_of_a_user_waits_queued_until_a_slot_frees() -> None:
    tool = Flaky()
    steps = []
    for n in range(4):
        steps += [calls(("make_lesson", f"call_{n}"))]
    provider = ScriptedProvider(steps)
    f = fakes()
    service = make_service(provider, fakes=f, tools=ToolRegistry([task_tool(tool)]))
    conversations = [(await run_to_end(service, ALICE, f"lesson {n}"))[0] for n in range(4)]

    granted = take(f.queue)
    assert len(granted) == 3
    ledger = await f.ledger.get("alice")
    assert sorted(r.status for r in ledger.tasks.values()) == [
        "queued",
        "running",
        "running",
        "running",
    ]
    fourth = await stored(service, conversations[3])
    assert fourth.tasks is not None and [t.status for t in fourth.tasks.values()] == ["queued"]

    provider.steps.append(Step.reply("First lesson ready."))
    await service.handler().handle(TASK_PAYLOAD.validate_json(granted[0].body))
    (next_task,) = take(f.queue)
    assert TASK_PAYLOAD.validate_json(next_task.body).conversation_id == conversations[3]


@pytest.mark.parametrize("times", [1, 3])
async def test_acknowledged_send_is_answered_by_a_reply_task(times: int) -> None:
    provider = ScriptedProvider([Step.reply("Hello from a task.")])
    f = fakes()
    service = make_service(provider, fakes=f)
    sent = await service.agent.send(ALICE, "hello", None, background=True)
    opened = await stored(service, sent.conversation_id)
    assert opened.active_run is not None and opened.active_run.status == "queued"

    await deliver_all(service, f.queue, times=times)

    after = await stored(service, sent.conversation_id)
    assert [m.text for m in after.messages] == ["hello", "Hello from a task."]
    assert after.active_run is None


async def test_transient_provider_error_in_a_task_is_retried() -> None:
    tool = Flaky(failures=1)
    provider = ScriptedProvider([calls(("make_lesson", "call_1")), Step.reply("Ready.")])
    f = fakes()
    service = make_service(
        provider, fakes=f, tools=ToolRegistry([task_tool(tool)]), task_retry_base_ms=10
    )
    conversation_id, _ = await run_to_end(service, ALICE, "lesson")
    await deliver_all(service, f.queue)
    after = await stored(service, conversation_id)
    assert len(tool.runs) == 2 and tool.runs[0] == tool.runs[1]
    assert [s for _, s, _ in results(after)] == ["ok"]


async def test_task_not_enqueued_while_the_queue_is_down_runs_once_it_is_back() -> None:
    provider = ScriptedProvider([calls(("make_lesson", "call_1")), Step.reply("Ready.")])
    f = fakes()
    f.queue.failing = True
    tool = Flaky()
    service = make_service(
        provider, fakes=f, tools=ToolRegistry([task_tool(tool)]), task_lease_seconds=1
    )
    conversation_id, events = await run_to_end(service, ALICE, "lesson please")

    # The task is in the ledger before the message says "queued": nothing is lost.
    assert isinstance(events[-1], DoneEvent) and events[-1].status == "queued"
    ledger = await f.ledger.get("alice")
    assert [r.status for r in ledger.tasks.values()] == ["running"]
    assert f.queue.take() == []

    await asyncio.sleep(1.1)  # the granted attempt's lease lapses unclaimed
    f.queue.failing = False
    await service.scheduler.sweep("alice")  # what the run's watchdog does
    await deliver_all(service, f.queue)

    after = await stored(service, conversation_id)
    assert len(tool.runs) == 1
    assert [s for _, s, _ in results(after)] == ["ok"]
    assert after.messages[-1].text == "Ready."


async def test_acknowledged_send_whose_task_cannot_be_queued_fails_cleanly() -> None:
    provider = ScriptedProvider([])
    f = fakes()
    f.queue.failing = True
    service = make_service(provider, fakes=f)
    with pytest.raises(QueueUnavailable):
        await service.agent.send(ALICE, "hello", None, background=True)
    (conversation,) = [await f.store.get(*key) for key in f.store._documents]
    assert conversation is not None and conversation.active_run is None
    user, reply = conversation.messages
    assert user.text == "hello"
    assert reply.status == "error" and reply.error is not None
    assert reply.error.code == "queue_unavailable"


async def test_a_stop_that_lands_while_a_reply_saves_leaves_no_task_waiting() -> None:
    # Found by the stateful test: the run put its task in the ledger, then found the
    # stop while saving; its calls were closed, but the task stayed granted (a slot
    # held, a call that no longer waits for it) until its lease lapsed.
    provider = ScriptedProvider([calls(("make_lesson", "call_1"))])
    f = fakes()
    service = make_service(provider, fakes=f, tools=ToolRegistry([task_tool(Flaky())]))
    submit = service.scheduler.submit
    stopped: list[str] = []

    async def submit_then_stop(user_id: str, conversation_id: str, *args: Any, **kw: Any) -> Any:
        granted = await submit(user_id, conversation_id, *args, **kw)
        await service.agent.stop(user_id, conversation_id)  # the user presses stop now
        stopped.append(conversation_id)
        return granted

    service.scheduler.submit = submit_then_stop  # type: ignore[method-assign]
    conversation_id, events = await run_to_end(service, ALICE, "make a lesson on tides")
    assert stopped == [conversation_id]
    assert isinstance(events[-1], DoneEvent) and events[-1].status == "stopped"
    ledger = await f.ledger.get("alice")
    assert [r.status for r in ledger.tasks.values()] == ["cancelled"]
    conversation = await stored(service, conversation_id)
    assert conversation.active_run is None
    assert [r[1] for r in results(conversation)] == ["error"]


async def test_a_delivery_writes_each_document_only_as_often_as_it_changes() -> None:
    """One delivery of a task whose result is followed up, its writes counted. The
    conversation, three: one judges the call and starts it, one records the result and
    opens the follow-up (the ledger's admission in the same commit), one closes it (the
    release in the same commit). The ledger, six: the claim (with the section shown
    running), the admission, the follow-up's model step reserved and settled, the
    release, the finish (with the section ended). The
    conversation took five before the call was judged and started in one write, and
    the result recorded with the follow-up's opening."""
    provider = ScriptedProvider([calls(("make_lesson", "call_1")), Step.reply("Done.")])
    f = fakes()
    service = make_service(provider, fakes=f, tools=ToolRegistry([task_tool(Flaky())]))
    conversation_id, _ = await run_to_end(service, ALICE, "lesson please")
    before = (f.store.writes[conversation_id], f.ledger.writes, dict(f.sections.writes))

    assert await deliver_all(service, f.queue) == 1

    after = await stored(service, conversation_id)
    assert after.messages[-1].text == "Done." and after.active_run is None
    conversation_writes = f.store.writes[conversation_id] - before[0]
    ledger_writes = f.ledger.writes - before[1]
    (task_id,) = f.sections.writes
    section_writes = f.sections.writes[task_id] - before[2].get(task_id, 0)
    assert (conversation_writes, ledger_writes, section_writes) == (3, 6, 2)
