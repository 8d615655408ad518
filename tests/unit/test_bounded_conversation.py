"""A conversation stays bounded and never wedges when it is full: the queue of waiting
messages is capped (429), and every path that closes something (a run ending, a stop,
the watchdog, a task's result) still lands on a document as full as new content can
make it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest
from pydantic import BaseModel

from shared.agent.run.loop import Run
from shared.agent.run.runs import QUEUE_RETRY_SECONDS, finish_run, new_run, open_run
from shared.agent.stream.events import DoneEvent
from shared.agent.stream.transcript import Frame
from shared.agent.waiting.results import mark_running, record_results
from shared.clock import ManualClock
from shared.config import Settings
from shared.errors import ConfigurationError, ConversationTooLarge, RateLimited
from shared.ids import task_id_for
from shared.llm.base import Finish, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import ContentPart, Conversation, Message, TaskState, ToolCall
from shared.schemas.tasks import TASK_PAYLOAD, WatchdogTask
from shared.store.limits import MAX_DOCUMENT_BYTES
from shared.store.patch import stored_size
from shared.tools.base import Tool, ToolContext, ToolRegistry
from tests.unit.helpers import ALICE, Harness, api_of, make_service, serving

T = TypeVar("T")
KB = 1024


async def stored(service: Harness, conversation_id: str) -> Conversation:
    conversation = await service.store.get("alice", conversation_id)
    assert conversation is not None
    return conversation


async def settle(clock: ManualClock, work: Awaitable[T]) -> T:
    """``work`` run to its end, the clock moving on while it waits."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await clock.advance(0.5)
    return task.result()


async def deliver(service: Harness, clock: ManualClock) -> None:
    """Every task but the watchdogs, delivered until none is left (queued replies)."""
    handler = service.handler()
    while tasks := [t for t in service.fakes.queue.take() if not t.name.startswith("watch-")]:
        for task in tasks:
            await settle(clock, handler.handle(TASK_PAYLOAD.validate_json(task.body)))


async def queue_as_much_as_it_takes(
    service: Harness, conversation_id: str
) -> tuple[list[str], set[int]]:
    """Queue messages behind the live run, 32 KB ones first, then ever smaller ones,
    until even a tiny one is refused; returns the texts it took and the refusals."""
    taken: list[str] = []
    refusals: set[int] = set()
    size = 32 * KB
    while size >= 16:
        text = f"{len(taken):03d} " + "q" * (size - 4)
        try:
            await service.agent.send(ALICE, text, conversation_id, when_busy="queue")
        except (RateLimited, ConversationTooLarge) as exc:
            refusals.add(exc.status)
            size //= 2
            continue
        taken.append(text)
    return taken, refusals


async def history(service: Harness, conversation_id: str) -> list[Message]:
    """Every message of the conversation: those rolled over into the archive, then the
    live ones."""
    conversation = await stored(service, conversation_id)
    counted = conversation.archived.segments if conversation.archived else 0
    segments = await service.store.segments("alice", conversation_id)
    archived = [m for s in segments if s.segment <= counted for m in s.messages]
    return [*archived, *conversation.messages]


# The caps lifted, so that only the document's size stops the queue (then the room kept
# for closing is all that lets each run end).
UNCAPPED = {"queued_messages_per_conversation": 1000, "queued_message_bytes": 10 * KB * KB}


@pytest.mark.parametrize("capped", [True, False], ids=["capped", "uncapped"])
@pytest.mark.leaves_steps("a reply for as many messages as the queue might take")
async def test_a_queue_filled_as_far_as_it_goes_never_wedges_the_conversation(
    capped: bool,
) -> None:
    clock = ManualClock()
    provider = ScriptedProvider(
        [Step.reply("Thinking", " it over", delay=5)] + [Step.reply("ok")] * 60, clock=clock
    )
    service = make_service(provider, clock=clock, **({} if capped else UNCAPPED))
    run = await service.start(ALICE, "hello")
    live = asyncio.ensure_future(run.execute())
    await clock.advance(1)
    taken, refusals = await queue_as_much_as_it_takes(service, run.conversation_id)
    # Capped, the queue is refused with 429 long before the document fills.
    assert refusals == ({429} if capped else {507})
    await settle(clock, live)
    await deliver(service, clock)

    await all_answered(service, run.conversation_id, ["hello", *taken])
    if capped:
        assert 0 < len(taken) <= service.settings.queued_messages_per_conversation
        # And the conversation goes on.
        provider.steps.append(Step.reply("Still here."))
        again = await service.start(ALICE, "still there?", run.conversation_id)
        await settle(clock, again.execute())


async def all_answered(service: Harness, conversation_id: str, sent: list[str]) -> None:
    """Nothing is left running or waiting, and each message sent has its reply."""
    conversation = await stored(service, conversation_id)
    assert conversation.active_run is None and not conversation.queued_messages
    messages = await history(service, conversation_id)
    assert [m.text for m in messages if m.role == "user"] == sent
    replies = [m for m in messages if m.role == "assistant"]
    assert len(replies) == len(sent)
    assert all(m.status != "streaming" for m in replies)


async def test_the_queue_is_capped_by_count_then_429_and_nothing_changes() -> None:
    clock = ManualClock()
    provider = ScriptedProvider([Step.reply("Thinking", delay=5)], clock=clock)
    service = make_service(provider, clock=clock, queued_messages_per_conversation=2)
    run = await service.start(ALICE, "hello")
    live = asyncio.ensure_future(run.execute())
    for text in ("second", "third"):
        await service.agent.send(ALICE, text, run.conversation_id, when_busy="queue")
    writes = service.store.writes[run.conversation_id]
    before = await stored(service, run.conversation_id)

    with pytest.raises(RateLimited) as refused:
        await service.agent.send(ALICE, "fourth", run.conversation_id, when_busy="queue")
    assert refused.value.status == 429 and refused.value.retry_after >= 1
    assert "2 messages" in refused.value.message
    assert service.store.writes[run.conversation_id] == writes
    assert await stored(service, run.conversation_id) == before
    await settle(clock, live)
    # The run slot the refused send took is free again: a new conversation starts.
    assert (await service.agent.send(ALICE, "elsewhere", None)).run is not None


async def test_a_full_queue_is_429_with_retry_after_over_http() -> None:
    clock = ManualClock()
    provider = ScriptedProvider([Step.reply("Thinking", delay=5)], clock=clock)
    service = make_service(provider, clock=clock, queued_messages_per_conversation=1)
    run = await service.start(ALICE, "hello")
    live = asyncio.ensure_future(run.execute())
    body = {"text": "and another", "conversationId": run.conversation_id, "whenBusy": "queue"}
    auth = {"Authorization": "Bearer alice-token"}
    async with serving(api_of(service)) as client:
        taken = await client.post("/api/spark/agent/messages", headers=auth, json=body)
        refused = await client.post("/api/spark/agent/messages", headers=auth, json=body)
    assert taken.status_code == 202
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) == QUEUE_RETRY_SECONDS
    await settle(clock, live)


@pytest.mark.leaves_steps("the run is cancelled before it calls the model")
async def test_the_queue_is_capped_by_bytes_then_429() -> None:
    clock = ManualClock()
    provider = ScriptedProvider([Step.reply("Thinking", delay=5)], clock=clock)
    service = make_service(provider, clock=clock, queued_message_bytes=100 * KB)
    run = await service.start(ALICE, "hello")
    live = asyncio.ensure_future(run.execute())
    cid = run.conversation_id
    for n in range(3):
        await service.agent.send(ALICE, f"{n} " + "q" * 32_000, cid, when_busy="queue")
    with pytest.raises(RateLimited) as refused:
        await service.agent.send(ALICE, "3 " + "q" * 32_000, cid, when_busy="queue")
    assert "KB" in refused.value.message
    # A small one still fits under the bytes.
    await service.agent.send(ALICE, "a short one", cid, when_busy="queue")
    waiting = await stored(service, cid)
    assert len(waiting.queued_messages or []) == 4
    live.cancel()


# -- closing on a full document ---------------------------------------------------------


async def brim(service: Harness) -> tuple[str, Run]:
    """A new conversation whose first message is as long as a send accepts (the
    document as full as new content can make it), and its run, opened, not started."""
    # Probed on a harness of its own: each accepted probe asks the model at once (its
    # head start), and ``service``'s script is for the run returned here.
    probes = ScriptedProvider([Step.reply("probe")] * 32)
    prober = make_service(probes, clock=ManualClock(), runs_per_user=100)
    low, high = 0, MAX_DOCUMENT_BYTES
    while low < high:  # the longest text a send takes, each probe in its own conversation
        middle = (low + high + 1) // 2
        try:
            await prober.agent.send(ALICE, "x" * middle, None)
            low = middle
        except ConversationTooLarge:
            high = middle - 1
    probes.steps.clear()  # the probes' runs are never executed
    sent = await service.agent.send(ALICE, "x" * low, None)
    assert sent.run is not None
    return sent.conversation_id, sent.run


def brim_service(provider: ScriptedProvider, clock: ManualClock, **settings: int) -> Harness:
    return make_service(provider, clock=clock, runs_per_user=100, **settings)


async def test_a_run_on_a_full_document_closes() -> None:
    clock = ManualClock()
    service = brim_service(ScriptedProvider([Step.reply("Hello", " there")]), clock)
    conversation_id, run = await brim(service)
    frames: list[Frame] = []
    await settle(clock, run.execute(frames.append))

    assert isinstance(frames[-1].event, DoneEvent)
    conversation = await stored(service, conversation_id)
    assert conversation.active_run is None
    reply = conversation.messages[-1]
    assert reply.id == run.message_id and reply.status == "complete"
    # Closing makes the document no larger (the run record goes), so nothing is cut.
    assert reply.text == "Hello there"


async def dead_behind_a_full_queue(service: Harness, clock: ManualClock) -> tuple[Run, list[str]]:
    """A run whose process died before it wrote anything, and as many messages queued
    behind it as the document takes; its lease has lapsed."""
    run = await service.start(ALICE, "hello")
    taken, refusals = await queue_as_much_as_it_takes(service, run.conversation_id)
    assert refusals == {507}
    await clock.advance(service.settings.run_lease_seconds + 31)
    return run, taken


@pytest.mark.leaves_steps("a reply for as many messages as the queue might take")
async def test_the_watchdog_closes_a_dead_run_in_front_of_a_full_queue() -> None:
    clock = ManualClock()
    service = make_service(ScriptedProvider([Step.reply("ok")] * 60), clock=clock, **UNCAPPED)
    run, taken = await dead_behind_a_full_queue(service, clock)
    watchdog = WatchdogTask(user_id="alice", conversation_id=run.conversation_id, run_id=run.run_id)
    assert await service.handler().handle(watchdog) == "done"

    closed = (await history(service, run.conversation_id))[1]
    assert closed.id == run.message_id and closed.status == "error"
    assert closed.error is not None and closed.error.code == "run_interrupted"
    await deliver(service, clock)
    await all_answered(service, run.conversation_id, ["hello", *taken])


@pytest.mark.leaves_steps("a reply for as many messages as the queue might take")
async def test_a_stop_ends_a_dead_run_in_front_of_a_full_queue() -> None:
    clock = ManualClock()
    service = make_service(ScriptedProvider([Step.reply("ok")] * 60), clock=clock, **UNCAPPED)
    run, taken = await dead_behind_a_full_queue(service, clock)
    assert (await service.agent.stop("alice", run.conversation_id)).status == "stopped"

    closed = (await history(service, run.conversation_id))[1]
    assert closed.id == run.message_id and closed.status == "stopped"
    await deliver(service, clock)
    await all_answered(service, run.conversation_id, ["hello", *taken])


async def test_a_stop_ends_a_live_run_on_a_full_document() -> None:
    clock = ManualClock()
    provider = ScriptedProvider([Step.reply("Let me think", delay=30)], clock=clock)
    service = brim_service(provider, clock)
    conversation_id, run = await brim(service)
    frames: list[Frame] = []
    live = asyncio.ensure_future(run.execute(frames.append))
    await clock.advance(1)
    assert (await service.agent.stop("alice", conversation_id)).status == "stopping"
    await settle(clock, live)

    assert frames[-1].event == DoneEvent(run.message_id, "stopped")
    conversation = await stored(service, conversation_id)
    assert conversation.active_run is None
    assert conversation.messages[-1].status == "stopped"


async def test_a_task_result_on_a_full_document_lands_and_nothing_is_left_running() -> None:
    class Topic(BaseModel):
        topic: str

    async def make(args: Topic, context: ToolContext) -> str:
        return "a lesson on " + args.topic * 200

    clock = ManualClock()
    tool = Tool("make_lesson", "Make a lesson.", Topic, "Creating lesson", make, "task")
    provider = ScriptedProvider(
        [Step([ToolCallRequest("a", "make_lesson", '{"topic": "tides"}'), Finish("tool_calls")])]
    )
    service = make_service(provider, clock=clock, tools=ToolRegistry([tool]), runs_per_user=100)
    conversation_id, run = await brim(service)
    await settle(clock, run.execute())
    await deliver(service, clock)

    conversation = await stored(service, conversation_id)
    assert conversation.active_run is None
    calls = [p.tool_call for m in conversation.messages for p in m.content if p.tool_call]
    results = [p.tool_result for m in conversation.messages for p in m.content if p.tool_result]
    assert [c.id for c in calls] == [r.tool_call_id for r in results]
    assert results[0].status == "error" and "too large" in results[0].output_json
    assert [t.status for t in (conversation.tasks or {}).values()] == ["failed"]
    ledger = await service.fakes.ledger.get("alice")
    assert [r.status for r in ledger.tasks.values()] == ["failed"]


# -- the tasks map ----------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def task_call(call_id: str) -> ContentPart:
    return ContentPart(
        type="tool_call",
        tool_call=ToolCall(
            id=call_id,
            name="make_lesson",
            args_json='{"topic": "tides"}',
            display_text="Creating lesson",
            execution="task",
            status="queued",
        ),
    )


def test_the_tasks_map_keeps_every_live_entry_and_only_the_newest_finished_ones() -> None:
    """200 turns of 5 task calls each: the first turn's tasks still run and the second's
    wait on the user; every later one finished before the next turn."""
    conversation = Conversation(
        id="conv", participant_ids=["alice"], created_at=T0, updated_at=T0, last_message_at=T0
    )
    for turn in range(200):
        now = T0 + timedelta(minutes=turn)
        user = Message(
            id=f"u{turn}",
            role="user",
            created_at=now,
            status="complete",
            content=[ContentPart.of_text(f"five lessons, please ({turn})")],
        )
        run = new_run(f"r{turn}", f"a{turn}", now, now + timedelta(seconds=90), user.id)
        assert run.message is not None
        conversation = open_run(conversation, user, run)
        calls = [f"c{turn}x{k}" for k in range(5)]
        reply = run.message.model_copy(
            update={"status": "complete", "content": [task_call(c) for c in calls]}
        )
        status = "waiting_on_user" if turn == 1 else "queued"
        tasks = {
            task_id_for("conv", c): TaskState(
                status=status,
                tool="make_lesson",
                tool_call_id=c,
                display_text="Creating lesson",
                updated_at=now,
            )
            for c in calls
        }
        conversation = finish_run(conversation, run.run_id, reply, now, now, tasks)
        if turn == 0:
            for call in calls:
                conversation = mark_running(conversation, call, now)
        elif turn > 1:
            outputs = dict.fromkeys(calls, '{"lesson": "made"}')
            conversation = record_results(conversation, outputs, "ok", now)

    kept = conversation.tasks or {}
    live = {k: v.status for k, v in kept.items() if v.status not in ("completed", "failed")}
    assert sorted(set(live.values())) == ["running", "waiting_on_user"] and len(live) == 10
    finished = sorted((v.updated_at, v.tool_call_id) for k, v in kept.items() if k not in live)
    # As the ledger keeps its 50 newest finished records (plus one turn's, finished
    # since the last run ended).
    assert 50 <= len(finished) <= 55
    assert finished[-1][1] == "c199x4"
    assert stored_size({"tasks": {k: v.to_firestore() for k, v in kept.items()}}) < 12_000


def test_the_queue_caps_are_read_from_the_environment() -> None:
    env = {"SPARK_QUEUED_MESSAGES_PER_CONVERSATION": "3", "SPARK_QUEUED_MESSAGE_BYTES": "70000"}
    settings = Settings.from_env(env)
    assert (settings.queued_messages_per_conversation, settings.queued_message_bytes) == (
        3,
        70_000,
    )
    assert Settings.from_env({}).queued_messages_per_conversation == 10
    # Fewer bytes than one message of the largest kind could never queue it.
    with pytest.raises(ConfigurationError, match="SPARK_QUEUED_MESSAGE_BYTES"):
        Settings.from_env({"SPARK_QUEUED_MESSAGE_BYTES": "32768"})
