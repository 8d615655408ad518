"""Runs as durable records, on fakes: flat-cost streaming writes, stop, one run per
conversation (or a queue), watchdogs, and the crash windows a code review found."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from pydantic import BaseModel

from shared.agent.run.finish import RunEnd
from shared.agent.stream.events import DoneEvent, ErrorEvent, TaskQueuedEvent, TextEvent
from shared.agent.stream.transcript import CUT_NOTE, Frame
from shared.agent.waiting.results import follow_up_id
from shared.clock import ManualClock
from shared.errors import NoActiveRun, RunInProgress, StoreError
from shared.llm.base import Finish, TextDelta, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.queue.base import QueuedTask
from shared.schemas.documents import Conversation
from shared.schemas.tasks import TASK_PAYLOAD, WatchdogTask
from shared.store.memory import InMemoryTaskLedgerStore
from shared.tools.base import Tool, ToolContext, ToolRegistry
from tests.unit.helpers import ALICE, Fakes, Harness, make_service, run_frames


class Topic(BaseModel):
    topic: str


def recorder(
    runs: list[str], gate: asyncio.Event | None = None, started: asyncio.Event | None = None
) -> Tool[Topic]:
    async def make(args: Topic, context: ToolContext) -> dict[str, str]:
        runs.append(context.tool_call_id)
        if started is not None:
            started.set()
        if gate is not None:
            await gate.wait()
        return {"lesson": args.topic}

    return Tool("make_lesson", "Make a lesson.", Topic, "Creating lesson", make, "task")


async def stored(service: Harness, conversation_id: str) -> Conversation:
    conversation = await service.store.get("alice", conversation_id)
    assert conversation is not None
    return conversation


def split(queue_tasks: list[QueuedTask]) -> tuple[list[QueuedTask], list[QueuedTask]]:
    """(watchdogs, the rest)"""
    watchdogs = [t for t in queue_tasks if t.name.startswith("watch-")]
    return watchdogs, [t for t in queue_tasks if not t.name.startswith("watch-")]


async def test_streaming_writes_send_only_the_active_run_at_any_length() -> None:
    clock = ManualClock()
    provider = ScriptedProvider(
        [Step.reply(f"r{n}") for n in range(40)]
        + [Step.reply(*[f"w{n} " for n in range(12)], delay=0.2)],
        clock=clock,
    )
    service = make_service(provider, clock=clock)
    conversation_id = ""
    for n in range(40):
        run = await service.start(ALICE, f"m{n}", conversation_id or None)
        conversation_id = run.conversation_id
        task = asyncio.create_task(run.execute())
        while not task.done():
            await clock.advance(0.1)
    written_before = len(service.store.written[conversation_id])
    run = await service.start(ALICE, "long one", conversation_id)
    task = asyncio.create_task(run.execute())
    while not task.done():
        await clock.advance(0.1)

    writes = service.store.written[conversation_id][written_before:]
    opening, *streaming, final = writes
    assert "messages" in opening and any(p.startswith("activeRun") for p in opening)
    # Each streaming write sends the reply's content and the renewed lease, nothing else.
    assert streaming
    assert all(
        paths == {"activeRun.message.content", "activeRun.leaseExpiresAt"} for paths in streaming
    )
    assert final == {"messages", "activeRun", "updatedAt", "lastMessageAt"}
    conversation = await stored(service, conversation_id)
    assert len(conversation.messages) == 82 and conversation.active_run is None


async def test_stop_ends_a_silent_run_within_a_second_keeping_its_text() -> None:
    clock = ManualClock()
    provider = ScriptedProvider(
        [Step([TextDelta("Let me think"), TextDelta(" very hard"), Finish("stop")], delay=30)],
        clock=clock,
    )
    service = make_service(provider, clock=clock)
    run = await service.start(ALICE, "think", None)
    frames: list[Frame] = []
    task = asyncio.create_task(run.execute(frames.append))
    await clock.advance(31)  # "Let me think" streamed; the model then goes quiet
    stopped = await service.agent.stop("alice", run.conversation_id)
    assert stopped.status == "stopping"
    await clock.advance(1.1)
    await task

    assert frames[-1].event == DoneEvent(run.message_id, "stopped")
    text = "".join(f.event.content for f in frames if isinstance(f.event, TextEvent))
    conversation = await stored(service, run.conversation_id)
    message = conversation.messages[-1]
    assert (message.status, message.finish_reason, message.text) == ("stopped", "stopped", text)
    assert text == "Let me think"
    assert conversation.active_run is None
    with pytest.raises(NoActiveRun):
        await service.agent.stop("alice", run.conversation_id)


async def test_stop_while_streaming_is_noticed_by_the_next_write() -> None:
    provider = ScriptedProvider([Step.reply(*[f"w{n} " for n in range(50)], delay=0.02)])
    service = make_service(provider, throttle_ms=50)
    run = await service.start(ALICE, "go", None)
    frames: list[Frame] = []
    streaming = asyncio.Event()

    def seen(frame: Frame) -> None:
        frames.append(frame)
        if isinstance(frame.event, TextEvent):
            streaming.set()

    task = asyncio.create_task(run.execute(seen))
    await streaming.wait()  # stopped mid-reply: 49 words (a second at least) to come
    await service.agent.stop("alice", run.conversation_id)
    await asyncio.wait_for(task, 30)  # (a net: it ends at the next write)
    assert isinstance(frames[-1].event, DoneEvent) and frames[-1].event.status == "stopped"
    conversation = await stored(service, run.conversation_id)
    streamed = "".join(f.event.content for f in frames if isinstance(f.event, TextEvent))
    assert conversation.messages[-1].text == streamed
    assert 0 < len(streamed) < len("".join(f"w{n} " for n in range(50)))


async def test_stop_cancels_tasks_not_started_and_running_ones_get_no_follow_up() -> None:
    runs: list[str] = []
    provider = ScriptedProvider(
        [
            Step(
                [
                    ToolCallRequest("a", "make_lesson", '{"topic": "tides"}'),
                    ToolCallRequest("b", "make_lesson", '{"topic": "waves"}'),
                    Finish("tool_calls"),
                ]
            )
        ]
    )
    fakes = Fakes()
    gate, started = asyncio.Event(), asyncio.Event()
    service = make_service(
        provider,
        fakes=fakes,
        tools=ToolRegistry([recorder(runs, gate, started)]),
        tasks_per_user=1,
    )
    conversation_id, frames = await run_frames(service, ALICE, "two lessons")
    assert isinstance(frames[-1].event, DoneEvent) and frames[-1].event.status == "queued"
    _, (first,) = split(fakes.queue.take())
    handler = service.handler()
    # The first task is claimed and running when the user stops.
    payload = TASK_PAYLOAD.validate_json(first.body)
    claim = asyncio.create_task(handler.handle(payload))
    await started.wait()
    stopped = await service.agent.stop("alice", conversation_id)
    gate.set()
    await claim
    assert stopped.status == "stopped"

    conversation = await stored(service, conversation_id)
    statuses = sorted(t.status for t in (conversation.tasks or {}).values())
    assert statuses == ["cancelled", "completed"]
    assert len(runs) == 1  # the cancelled one never ran
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "tool"]
    ledger = await fakes.ledger.get("alice")
    assert sorted(r.status for r in ledger.tasks.values()) == ["cancelled", "completed"]


async def test_second_send_while_live_is_409_and_ten_racing_sends_open_one_run() -> None:
    provider = ScriptedProvider([Step.reply("first"), Step.reply("slow", delay=0.05)])
    service = make_service(provider)
    conversation_id, _ = await run_frames(service, ALICE, "hello")
    outcomes = await asyncio.gather(
        *(service.agent.send(ALICE, f"race {n}", conversation_id) for n in range(10)),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(o, RunInProgress) for o in outcomes if o not in winners)
    conversation = await stored(service, conversation_id)
    assert [m.role for m in conversation.messages] == ["user", "assistant", "user"]
    run = winners[0].run
    assert run is not None
    await run.execute()


async def test_queued_messages_are_answered_in_order_through_tasks() -> None:
    provider = ScriptedProvider(
        [Step.reply("one", delay=0.05), Step.reply("two"), Step.reply("three")]
    )
    fakes = Fakes()
    service = make_service(provider, fakes=fakes)
    run = await service.start(ALICE, "first", None)
    live = asyncio.create_task(run.execute())
    second = await service.agent.send(ALICE, "second", run.conversation_id, when_busy="queue")
    third = await service.agent.send(ALICE, "third", run.conversation_id, when_busy="queue")
    assert second.run is None and third.run is None
    waiting = await stored(service, run.conversation_id)
    assert [m.text for m in waiting.queued_messages or []] == ["second", "third"]
    await live

    handler = service.handler()
    while tasks := split(fakes.queue.take())[1]:
        for task in tasks:
            await handler.handle(TASK_PAYLOAD.validate_json(task.body))
    conversation = await stored(service, run.conversation_id)
    assert [m.text for m in conversation.messages] == [
        "first",
        "one",
        "second",
        "two",
        "third",
        "three",
    ]
    assert conversation.queued_messages is None and conversation.active_run is None


async def test_watchdog_closes_a_dead_run_keeping_its_text_and_answers_its_calls() -> None:
    clock = ManualClock()
    fakes = Fakes()
    provider = ScriptedProvider([Step.reply("Hello", " there", delay=1)], clock=clock)
    service = make_service(provider, fakes=fakes, clock=clock, throttle_ms=0)
    run = await service.start(ALICE, "hello", None)
    task = asyncio.create_task(run.execute())
    await clock.advance(1.5)  # "Hello" streamed and saved...

    async def vanish(*_: object, **__: object) -> None:
        """What a killed process writes on its way out: nothing."""

    assert run._end is not None
    run._end.badly = vanish  # type: ignore[method-assign]
    task.cancel()  # ...then the instance vanishes without a word
    with pytest.raises(asyncio.CancelledError):
        await task
    watchdogs, _ = split(fakes.queue.take())
    assert watchdogs
    await clock.advance(service.settings.run_lease_seconds + 31)
    payload = TASK_PAYLOAD.validate_json(watchdogs[0].body)
    assert isinstance(payload, WatchdogTask)
    assert await service.handler().handle(payload) == "done"

    conversation = await stored(service, run.conversation_id)
    assert conversation.active_run is None
    message = conversation.messages[-1]
    assert message.status == "error" and message.error is not None
    assert message.error.code == "run_interrupted"
    assert message.text == "Hello"
    # Now the conversation takes messages again.
    provider.steps.append(Step.reply("Back."))
    again = await service.start(ALICE, "again", run.conversation_id)
    await again.execute()


async def test_watchdog_of_a_live_run_looks_again_later() -> None:
    clock = ManualClock()
    fakes = Fakes()
    service = make_service(ScriptedProvider([]), fakes=fakes, clock=clock)
    sent = await service.agent.send(ALICE, "hi", None)
    await asyncio.sleep(0)  # the watchdog is asked for while the run starts
    (watchdog,), _ = split(fakes.queue.take())
    # Its producer renewed the lease meanwhile (as each streaming write does).
    await clock.advance(60)
    later = clock.now() + timedelta(seconds=90)
    await service.store.mutate(
        "alice",
        sent.conversation_id,
        lambda c: c.model_copy(
            update={"active_run": c.active_run.model_copy(update={"lease_expires_at": later})}
        ),
    )
    await service.handler().handle(TASK_PAYLOAD.validate_json(watchdog.body))
    (again,), _ = split(fakes.queue.take())
    assert again.name != watchdog.name
    assert again.schedule_at == later + timedelta(seconds=service.settings.watchdog_grace_seconds)
    conversation = await stored(service, sent.conversation_id)
    assert conversation.active_run is not None


# -- crash windows -------------------------------------------------------------------


async def test_redelivered_follow_up_whose_first_delivery_died_is_not_left_streaming(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[str] = []
    fakes = Fakes()
    clock = ManualClock()  # the leases lapse when the test says, however slow the machine
    provider = ScriptedProvider(
        [Step([ToolCallRequest("a", "make_lesson", '{"topic": "x"}'), Finish("tool_calls")])]
    )
    service = make_service(
        provider,
        clock=clock,
        fakes=fakes,
        tools=ToolRegistry([recorder(runs)]),
        run_lease_seconds=2,
        task_lease_seconds=1,
        task_retry_base_ms=10,
    )
    conversation_id, _ = await run_frames(service, ALICE, "lesson")
    _, (task,) = split(fakes.queue.take())
    source = (await stored(service, conversation_id)).messages[-1]

    # The first delivery runs the tool, opens the follow-up, and is killed mid-reply.
    provider.steps.append(Step.reply("never", " finished", delay=30))
    first = asyncio.create_task(service.handler().handle(TASK_PAYLOAD.validate_json(task.body)))
    while (await stored(service, conversation_id)).active_run is None:  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # (the store has no event to wait on; a fake, polled)

    async def vanish(*_: object, **__: object) -> None:
        """What a killed process writes on its way out: nothing."""

    with monkeypatch.context() as patch:
        patch.setattr(RunEnd, "badly", vanish)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
    await clock.advance(1.1)  # the task's lease lapses; the follow-up's does not yet

    # The redelivery must not call the task done while its follow-up is "streaming".
    assert await service.handler().handle(TASK_PAYLOAD.validate_json(task.body)) == "done"
    ledger = await fakes.ledger.get("alice")
    assert [r.status for r in ledger.tasks.values()] == ["running"]
    _, (retry,) = split(fakes.queue.take())

    await clock.advance(2)  # now the follow-up's lease lapses too
    provider.steps.clear()
    payload = TASK_PAYLOAD.validate_json(retry.body)
    assert await service.handler().handle(payload) == "done"

    conversation = await stored(service, conversation_id)
    assert conversation.active_run is None
    follow_up = conversation.message(follow_up_id(source.id))
    assert follow_up is not None and follow_up.status == "error"
    assert follow_up.error is not None and follow_up.error.code == "run_interrupted"
    ledger = await fakes.ledger.get("alice")
    assert [r.status for r in ledger.tasks.values()] == ["completed"]
    assert len(runs) == 1


async def test_task_calls_reach_the_ledger_before_the_message_says_queued() -> None:
    class FailingLedger(InMemoryTaskLedgerStore):
        """Run slots are taken and freed; recording a task fails."""

        async def apply_with_sections(self, user_id, change):  # type: ignore[no-untyped-def]
            current = await self.get(user_id)
            if change(current)[0].tasks != current.tasks:
                raise StoreError("Firestore write failed: unavailable")
            return await super().apply_with_sections(user_id, change)

    runs: list[str] = []
    fakes = Fakes(ledger=FailingLedger())
    provider = ScriptedProvider(
        [Step([ToolCallRequest("a", "make_lesson", '{"topic": "x"}'), Finish("tool_calls")])]
    )
    service = make_service(provider, fakes=fakes, tools=ToolRegistry([recorder(runs)]))
    conversation_id, frames = await run_frames(service, ALICE, "lesson")

    assert isinstance(frames[-1].event, ErrorEvent)
    conversation = await stored(service, conversation_id)
    message = conversation.messages[-1]
    (call,) = [p.tool_call for p in message.content if p.tool_call]
    (result,) = [p.tool_result for p in message.content if p.tool_result]
    # No call is left "queued" with no task behind it: it is cancelled, with a result.
    assert call.status == "cancelled" and result.tool_call_id == call.id
    assert "Cancelled" in json.loads(result.output_json)["error"]


async def test_tool_call_ids_are_ours_and_unique_even_when_the_provider_repeats_them() -> None:
    runs: list[str] = []
    fakes = Fakes()
    same = '{"topic": "x"}'
    provider = ScriptedProvider(
        [
            Step(
                [
                    ToolCallRequest("call_0", "make_lesson", same),
                    ToolCallRequest("call_0", "make_lesson", same),
                    Finish("tool_calls"),
                ]
            ),
            Step([ToolCallRequest("call_0", "make_lesson", same), Finish("tool_calls")]),
        ]
    )
    service = make_service(provider, fakes=fakes, tools=ToolRegistry([recorder(runs)]))
    first, frames_one = await run_frames(service, ALICE, "two lessons")
    _, frames_two = await run_frames(service, ALICE, "one more", first)
    queued = [
        f.event.tool_call_id
        for f in [*frames_one, *frames_two]
        if isinstance(f.event, TaskQueuedEvent)
    ]
    assert len(queued) == 3 and len(set(queued)) == 3
    ledger = await fakes.ledger.get("alice")
    assert len(ledger.tasks) == 3
    conversation = await stored(service, first)
    calls = [p.tool_call.id for m in conversation.messages for p in m.content if p.tool_call]
    assert sorted(calls) == sorted(queued)


async def test_claims_of_a_queued_run_happen_once() -> None:
    fakes = Fakes()
    service = make_service(ScriptedProvider([Step.reply("Hi.")]), fakes=fakes)
    sent = await service.agent.send(ALICE, "hello", None, background=True)
    conversation = await stored(service, sent.conversation_id)
    assert conversation.active_run is not None
    run_id = conversation.active_run.run_id
    first = await service.agent.claim("alice", sent.conversation_id, run_id)
    assert first is not None
    assert await service.agent.claim("alice", sent.conversation_id, run_id) is None
    await first.execute()


async def filled(service: Harness, near: int) -> str:
    """A conversation whose document is ``near`` bytes from the most new content may
    fill (Firestore's limit, less the room kept for closing)."""
    from shared.store.limits import CLOSING_RESERVE, MAX_DOCUMENT_BYTES

    run = await service.start(ALICE, "x" * (MAX_DOCUMENT_BYTES - CLOSING_RESERVE - near))
    await run.execute()
    return run.conversation_id


async def test_a_reply_that_would_not_fit_is_cut_with_a_note_and_the_run_closes() -> None:
    provider = ScriptedProvider([Step.reply("ok"), Step.reply("long answer " * 20_000)])
    service = make_service(provider)
    conversation_id = await filled(service, 60_000)
    _, frames = await run_frames(service, ALICE, "tell me everything", conversation_id)

    assert isinstance(frames[-1].event, DoneEvent)
    conversation = await stored(service, conversation_id)
    assert conversation.active_run is None
    reply = conversation.messages[-1]
    assert reply.status == "complete" and reply.text.endswith(CUT_NOTE)
    assert len(reply.text) < len("long answer " * 20_000)


async def test_a_task_result_that_would_not_fit_frees_its_slot_and_the_model_hears_it() -> None:
    class Huge(BaseModel):
        topic: str

    async def huge(args: Huge, context: ToolContext) -> str:
        return "y" * 200_000

    fakes = Fakes()
    tool = Tool("make_lesson", "Make a lesson.", Huge, "Creating lesson", huge, "task")
    provider = ScriptedProvider(
        [
            Step.reply("ok"),
            Step([ToolCallRequest("a", "make_lesson", '{"topic": "x"}'), Finish("tool_calls")]),
            Step.reply("That did not fit, sorry."),
        ]
    )
    service = make_service(
        provider, fakes=fakes, tools=ToolRegistry([tool]), tool_output_chars=300_000
    )
    conversation_id = await filled(service, 60_000)
    await run_frames(service, ALICE, "lesson", conversation_id)
    _, (task,) = split(fakes.queue.take())
    await service.handler().handle(TASK_PAYLOAD.validate_json(task.body))

    conversation = await stored(service, conversation_id)
    (result,) = [p.tool_result for m in conversation.messages for p in m.content if p.tool_result]
    assert result.status == "error" and "too large" in result.output_json
    ledger = await fakes.ledger.get("alice")
    assert [r.status for r in ledger.tasks.values()] == ["failed"]
    assert conversation.messages[-1].text == "That did not fit, sorry."
