from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from shared.agent.stream.events import DoneEvent, ErrorEvent, RunStartEvent, TextEvent
from shared.agent.stream.transcript import Frame
from shared.clock import ManualClock
from shared.errors import NotFound, ProviderUnavailable, RunInProgress
from shared.llm.base import Finish, ModelEvent, ModelRequest, TextDelta
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Usage
from shared.store.memory import InMemoryConversationStore
from tests.unit.helpers import ALICE, BOB, make_service, run_to_end, until


async def test_run_streams_events_and_persists_both_messages() -> None:
    provider = ScriptedProvider([Step.reply("Hello", ", ", "Alice!")])
    service = make_service(provider)
    conversation_id, events = await run_to_end(service, ALICE, "hello")

    assert isinstance(events[0], RunStartEvent)
    assert [e.content for e in events if isinstance(e, TextEvent)] == ["Hello", ", ", "Alice!"]
    assert events[-1] == DoneEvent(message_id=events[0].assistant_message_id, status="complete")

    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    user, assistant = stored.messages
    assert (user.role, user.text, user.status) == ("user", "hello", "complete")
    assert user.author is not None and user.author.user_id == "alice"
    assert user.author.display_name == "Alice Teacher"
    assert (assistant.role, assistant.text, assistant.status) == (
        "assistant",
        "Hello, Alice!",
        "complete",
    )
    assert assistant.model == "scripted"
    assert stored.active_run is None
    assert stored.participant_ids == ["alice"]


async def test_run_sends_history_and_system_prompt_to_the_model() -> None:
    provider = ScriptedProvider([Step.reply("First."), Step.reply("Second.")])
    service = make_service(provider)
    conversation_id, _ = await run_to_end(service, ALICE, "one")
    await run_to_end(service, ALICE, "two", conversation_id)

    request = provider.requests[1]
    assert request.system == "You are Spark AI Agent."
    assert [(m.role, m.text) for m in request.messages] == [
        ("user", "one"),
        ("assistant", "First."),
        ("user", "two"),
    ]


async def test_run_history_is_limited_to_the_latest_messages() -> None:
    provider = ScriptedProvider([Step.reply(f"r{n}") for n in range(5)])
    # At least 3 messages, moving 4 at once (two turns): from 3 to 6 messages.
    service = make_service(provider, history_messages=3, history_step=4)
    conversation_id, _ = await run_to_end(service, ALICE, "m0")
    for n in range(1, 5):
        await run_to_end(service, ALICE, f"m{n}", conversation_id)
    seen = [[m.text for m in request.messages] for request in provider.requests]
    assert seen[3] == ["m2", "r2", "m3"]  # 7 messages: from the 5th (after 4 of them)
    assert seen[4] == ["m2", "r2", "m3", "r3", "m4"]  # 9: it has not moved


class AskedProvider:
    """Records the user messages stored when it is asked (the head start may ask before
    the opening's commit lands: ``test_head_start.py``), then replies."""

    label = "asked"
    provider = "scripted"

    def __init__(self, store: InMemoryConversationStore) -> None:
        self.store = store
        self.seen: list[str] | None = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        keys = [k for k in self.store._documents if k[0] == "alice"]
        stored = await self.store.get(*keys[0]) if keys else None
        self.seen = [m.text for m in stored.messages if m.role == "user"] if stored else []
        yield TextDelta("ok")
        yield Finish("stop")


async def test_run_persists_the_user_message_with_its_reply_after_it() -> None:
    # The model is asked while the message is written (so it may not be stored yet when
    # asked), and nothing of the reply is kept or shown unless that write lands
    # (``test_head_start.py``): the message is stored, the reply after it.
    store = InMemoryConversationStore()
    provider = AskedProvider(store)
    conversation_id, events = await run_to_end(make_service(provider, store), ALICE, "remember me")
    assert provider.seen in ([], ["remember me"])
    assert TextEvent(content="ok") in events
    stored = await store.get("alice", conversation_id)
    assert stored is not None
    assert [(m.role, m.text) for m in stored.messages] == [
        ("user", "remember me"),
        ("assistant", "ok"),
    ]


async def test_run_provider_failure_midway_keeps_text_and_marks_error() -> None:
    failing = Step([TextDelta("Half a ")], error=ProviderUnavailable("The provider went away."))
    service = make_service(ScriptedProvider([failing]))
    conversation_id, events = await run_to_end(service, ALICE, "hello")

    assert events[-1] == ErrorEvent(message="The provider went away.", code="provider_unavailable")
    assert not any(isinstance(e, DoneEvent) for e in events)
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    user, assistant = stored.messages
    assert user.text == "hello"
    assert assistant.status == "error"
    assert assistant.text == "Half a "
    assert assistant.error is not None and assistant.error.code == "provider_unavailable"
    assert stored.active_run is None


async def test_run_stream_without_finish_is_a_failure_not_a_reply() -> None:
    service = make_service(ScriptedProvider([Step([TextDelta("cut")])]))
    conversation_id, events = await run_to_end(service, ALICE, "hello")
    assert isinstance(events[-1], ErrorEvent) and events[-1].code == "incomplete_response"
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None and stored.messages[1].status == "error"


async def test_run_unexpected_exception_never_leaves_message_streaming() -> None:
    class Broken:
        label = "broken"
        provider = "scripted"

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            yield TextDelta("x")
            raise KeyError("bug")

    service = make_service(Broken())
    conversation_id, events = await run_to_end(service, ALICE, "hello")
    assert isinstance(events[-1], ErrorEvent) and events[-1].code == "internal"
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None and stored.messages[1].status == "error"


async def test_start_unknown_or_other_users_conversation_is_not_found() -> None:
    service = make_service(ScriptedProvider([Step.reply("hi")]))
    conversation_id, _ = await run_to_end(service, ALICE, "hello")
    with pytest.raises(NotFound):
        await service.start(BOB, "mine now", conversation_id)
    with pytest.raises(NotFound):
        await service.start(ALICE, "hello", "conv_nope")
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None and len(stored.messages) == 2


async def test_start_while_a_run_is_live_is_refused_and_changes_nothing() -> None:
    service = make_service(ScriptedProvider([Step.reply("slow", delay=0.05)]))
    run = await service.start(ALICE, "first", None)
    with pytest.raises(RunInProgress):
        await service.start(ALICE, "second", run.conversation_id)
    stored = await service.store.get("alice", run.conversation_id)
    assert stored is not None and [m.text for m in stored.messages] == ["first"]
    assert stored.active_run is not None and stored.active_run.message is not None
    assert stored.active_run.message.text == ""
    await run.execute(lambda _: None)


async def test_start_closes_a_run_whose_lease_lapsed() -> None:
    clock = ManualClock()
    # The dead instance had asked the model already (its head start), then died.
    script = [Step.reply("never read"), Step.reply("again")]
    service = make_service(ScriptedProvider(script), clock=clock)
    dead = await service.start(ALICE, "first", None)  # its instance "dies": never executed
    await clock.advance(timedelta(seconds=service.settings.run_lease_seconds + 1).total_seconds())
    run = await service.start(ALICE, "second", dead.conversation_id)
    await run.execute(lambda _: None)

    stored = await service.store.get("alice", dead.conversation_id)
    assert stored is not None
    assert [(m.text, m.status) for m in stored.messages] == [
        ("first", "complete"),
        ("", "error"),
        ("second", "complete"),
        ("again", "complete"),
    ]
    assert stored.messages[1].error is not None
    assert stored.messages[1].error.code == "run_interrupted"


async def test_run_throttles_store_writes_while_streaming() -> None:
    clock = ManualClock()
    store = InMemoryConversationStore()
    chunks = [f"w{n} " for n in range(30)]
    provider = ScriptedProvider([Step.reply(*chunks, delay=0.1)], clock=clock)
    service = make_service(provider, store, clock)
    run = await service.start(ALICE, "hello", None)
    events: list[object] = []
    task = asyncio.create_task(run.execute(events.append))
    while not task.done():
        await clock.advance(0.1)
    await task
    # create + one write per 500 ms over 3 s of tokens + the final write
    assert store.writes[run.conversation_id] == 1 + 6 + 1
    stored = await store.get("alice", run.conversation_id)
    assert stored is not None and stored.messages[1].text == "".join(chunks)


async def test_run_cancelled_ends_message_as_error_not_streaming() -> None:
    service = make_service(ScriptedProvider([Step.reply("a", "b", delay=5)]))
    run = await service.start(ALICE, "hello", None)
    frames: list[Frame] = []
    task = asyncio.create_task(run.execute(frames.append))
    await until(lambda: bool(frames), "the run to start")  # mid-reply: the model is slow
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await service.store.get("alice", run.conversation_id)
    assert stored is not None
    assert stored.messages[1].status == "error" and stored.active_run is None


async def test_run_final_write_failure_still_ends_the_stream_with_an_error() -> None:
    class FailingFinal(InMemoryConversationStore):
        """Creating works; every later write blows up with an unexpected error."""

        async def mutate(self, user_id, conversation_id, change, reserve=0):  # type: ignore[no-untyped-def]
            raise RuntimeError("disk on fire")

        async def apply(self, user_id, conversation_id, change, *, reserve=0):  # type: ignore[no-untyped-def]
            raise RuntimeError("disk on fire")

        def put(self, user_id, conversation_id, document, fields=None):  # type: ignore[no-untyped-def]
            # The final write, in one commit with the slot's release (the opening store's).
            if self.document(user_id, conversation_id) is not None:
                raise RuntimeError("disk on fire")
            super().put(user_id, conversation_id, document, fields)

    store = FailingFinal()
    service = make_service(ScriptedProvider([Step.reply("hi")]), store)
    run = await service.start(ALICE, "hello", None)
    frames: list[Frame] = []
    await run.execute(frames.append)
    assert isinstance(frames[-1].event, ErrorEvent)
    assert frames[-1].event.message == "Your reply could not be saved; please try again."


async def test_run_end_saves_the_reply_and_frees_the_slot() -> None:
    service = make_service(ScriptedProvider([Step.reply("hi")]))
    run = await service.start(ALICE, "hello", None)
    await run.execute()
    stored = await service.store.get("alice", run.conversation_id)
    assert stored is not None and stored.active_run is None
    assert stored.messages[-1].status == "complete"
    assert (await service.fakes.ledger.get("alice")).runs == {}


async def test_a_final_write_that_fails_still_frees_the_slot() -> None:
    class FailingFinal(InMemoryConversationStore):
        def put(self, user_id, conversation_id, document, fields=None):  # type: ignore[no-untyped-def]
            if self.document(user_id, conversation_id) is not None:
                raise RuntimeError("disk on fire")
            super().put(user_id, conversation_id, document, fields)

    service = make_service(ScriptedProvider([Step.reply("hi")]), FailingFinal())
    run = await service.start(ALICE, "hello", None)
    await run.execute()
    assert (await service.fakes.ledger.get("alice")).runs == {}


async def test_run_lease_is_renewed_while_the_model_is_silent() -> None:
    clock = ManualClock()
    provider = ScriptedProvider([Step.reply("late reply", delay=200)], clock=clock)
    service = make_service(provider, clock=clock, run_lease_seconds=90, provider_idle_seconds=300)
    run = await service.start(ALICE, "think hard", None)
    frames: list[Frame] = []
    task = asyncio.create_task(run.execute(frames.append))
    await clock.advance(150)  # past the original lease, the model still silent
    with pytest.raises(RunInProgress):
        await service.start(ALICE, "are you there?", run.conversation_id)
    await clock.advance(300)  # the reply, then its finish, 200 s apart each
    await task
    assert isinstance(frames[-1].event, DoneEvent)


async def test_run_fails_when_the_model_goes_silent_for_too_long() -> None:
    clock = ManualClock()
    provider = ScriptedProvider([Step.reply("Thinking", "never", delay=100)], clock=clock)
    service = make_service(provider, clock=clock, provider_idle_seconds=60)
    run = await service.start(ALICE, "think hard", None)
    frames: list[Frame] = []
    task = asyncio.create_task(run.execute(frames.append))
    await clock.advance(63)
    await task
    last = frames[-1].event
    assert isinstance(last, ErrorEvent) and last.code == "provider_timeout"
    assert "60 seconds" in last.message
    stored = await service.store.get("alice", run.conversation_id)
    assert stored is not None and stored.active_run is None
    assert stored.messages[-1].status == "error"


async def test_run_taken_over_after_its_lease_stops_and_reports_an_error() -> None:
    service = make_service(
        ScriptedProvider([Step.reply("a", "b", "c", "d", delay=0.02)]), throttle_ms=0
    )
    run = await service.start(ALICE, "hello", None)
    # Another instance decided this run was dead and closed it.
    await service.store.mutate(
        "alice",
        run.conversation_id,
        lambda c: c.model_copy(update={"active_run": None}),
    )
    frames: list[Frame] = []
    await run.execute(frames.append)
    events = [f.event for f in frames]
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].code == "run_interrupted"
    assert not any(isinstance(e, DoneEvent) for e in events)


async def test_run_content_filter_finish_is_an_error_not_a_complete_reply() -> None:
    service = make_service(ScriptedProvider([Step([TextDelta("Some"), Finish("content_filter")])]))
    conversation_id, events = await run_to_end(service, ALICE, "hello")
    assert isinstance(events[-1], ErrorEvent) and events[-1].code == "content_filtered"
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None and stored.messages[1].status == "error"


async def test_reply_cut_by_the_token_limit_is_marked_length_with_its_usage() -> None:
    step = Step(
        [TextDelta("A long answ"), Finish("length", Usage(input_tokens=120, output_tokens=4096))]
    )
    service = make_service(ScriptedProvider([step]))
    conversation_id, events = await run_to_end(service, ALICE, "tell me everything")
    assert isinstance(events[-1], DoneEvent)
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    reply = stored.messages[-1]
    assert (reply.status, reply.finish_reason, reply.text) == ("complete", "length", "A long answ")
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (120, 4096)
