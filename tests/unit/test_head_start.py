"""The first model request of a send starts while its admission and its message are
written, in one commit (``shared/agent/sending/head_start.py``); nothing of it is shown or kept
unless that commit succeeds and the committed conversation asks for exactly that
request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from shared.agent.sending.head_start import HeadStart
from shared.agent.stream.events import TextEvent
from shared.agent.stream.transcript import Frame
from shared.clock import ManualClock
from shared.errors import SlotsTaken, StoreError
from shared.llm.base import Finish, ModelEvent, ModelRequest, ProviderName, TextDelta
from shared.schemas.documents import Message, Usage
from shared.schemas.server import TaskLedger
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryOpeningStore,
    InMemoryTaskLedgerStore,
)
from tests.unit.helpers import ALICE, Fakes, Harness, make_service


class Held:
    """A model whose reply to each request waits until the test lets it come (its
    time to first token); it records each request and each one cancelled."""

    provider: ClassVar[ProviderName] = "scripted"
    label = "held"

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []
        self.answer: list[asyncio.Event] = [asyncio.Event() for _ in replies]
        self.cancelled = 0
        self.read_out = 0
        """Replies whose text was read (the reader asked for what follows it)."""

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        n = len(self.requests)
        self.requests.append(request)
        try:
            await self.answer[n].wait()
            yield TextDelta(self.replies[n])
            self.read_out += 1
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled += 1
            raise
        # Closed here, the request had its answer: nothing was cancelled.
        yield Finish("stop", Usage(input_tokens=7, output_tokens=1))


class GatedOpenings(InMemoryOpeningStore):
    """The commit of a send's admission and message: the next one (``arm``) waits until
    ``gate`` opens, failing with ``fail`` if set."""

    def __init__(
        self, conversations: InMemoryConversationStore, ledger: InMemoryTaskLedgerStore
    ) -> None:
        super().__init__(conversations, ledger)
        self.armed = False
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.fail: Exception | None = None

    def rearm(self) -> None:
        self.armed, self.entered, self.gate = True, asyncio.Event(), asyncio.Event()

    async def open(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            self.entered.set()
            await self.gate.wait()
            if self.fail is not None:
                raise self.fail
        return await super().open(*args, **kwargs)


def gated(
    model: Held, clock: ManualClock | None = None, **settings: int
) -> tuple[Harness, GatedOpenings]:
    store, ledger = InMemoryConversationStore(), InMemoryTaskLedgerStore()
    openings = GatedOpenings(store, ledger)
    fakes = Fakes(store, ledger, openings=openings)
    return make_service(model, clock=clock, fakes=fakes, **settings), openings


def harness(
    model: Held, **settings: int
) -> tuple[Harness, InMemoryConversationStore, GatedOpenings]:
    service, openings = gated(model, **settings)
    return service, service.store, openings


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def texts(frames: list[Frame]) -> list[str]:
    return [f.event.content for f in frames if isinstance(f.event, TextEvent)]


async def test_the_model_is_asked_before_the_conversation_is_written() -> None:
    model = Held("Hello")
    service, store, commit = harness(model)
    commit.armed = True
    send = asyncio.create_task(service.agent.send(ALICE, "hi", None))
    await commit.entered.wait()
    await until(lambda: len(model.requests) == 1)
    assert not store.writes  # asked while the conversation's write is still in flight
    assert [(m.role, m.text) for m in model.requests[0].messages] == [("user", "hi")]

    model.answer[0].set()  # the reply is ready before the commit: it waits, unseen
    await asyncio.sleep(0)
    commit.gate.set()
    sent = await send
    assert sent.run is not None
    frames: list[Frame] = []
    await sent.run.execute(frames.append)

    assert texts(frames) == ["Hello"]
    assert len(model.requests) == 1 and model.cancelled == 0
    stored = await service.store.get("alice", sent.conversation_id)
    assert stored is not None
    assert [(m.role, m.text) for m in stored.messages] == [("user", "hi"), ("assistant", "Hello")]


async def test_a_refused_admission_cancels_the_request_and_writes_nothing() -> None:
    model = Held("first", "never shown")
    service, store, commit = harness(model, runs_per_user=1)
    first = await service.start(ALICE, "one")  # holds the only slot
    commit.armed = True
    send = asyncio.create_task(service.agent.send(ALICE, "two", None))
    await until(lambda: len(model.requests) == 2)
    commit.gate.set()
    with pytest.raises(SlotsTaken):
        await send

    assert model.cancelled == 1  # cancelled before its first byte
    assert list(store.writes) == [first.conversation_id]
    assert first.head_start is not None
    await first.head_start.discard()


async def test_a_user_refused_a_reply_gets_no_head_start_for_a_while() -> None:
    """Past a limit, each further send is refused too: its prompt must not go to the
    provider first (a cost per refused send), so this process withholds head starts
    from that user for a minute."""
    model = Held("first", "never shown", "later")
    clock = ManualClock(datetime(2026, 11, 23, 12, 0, tzinfo=UTC))
    service, commit = gated(model, clock, runs_per_user=1)
    first = await service.start(ALICE, "one")
    commit.armed = True
    send = asyncio.create_task(service.agent.send(ALICE, "two", None))
    await until(lambda: len(model.requests) == 2)
    commit.gate.set()
    with pytest.raises(SlotsTaken):
        await send

    commit.rearm()
    again = asyncio.create_task(service.agent.send(ALICE, "three", None))
    await asyncio.sleep(0.01)
    assert len(model.requests) == 2  # not asked while the admission is decided
    commit.gate.set()
    with pytest.raises(SlotsTaken):
        await again
    assert len(model.requests) == 2

    await clock.advance(61)
    assert first.head_start is not None
    await first.head_start.discard()
    commit.rearm()
    later = asyncio.create_task(service.agent.send(ALICE, "four", None))
    await until(lambda: len(model.requests) == 3)  # a head start again, a minute on
    commit.gate.set()
    with pytest.raises(SlotsTaken):
        await later


async def test_a_refused_admission_counts_what_the_cancelled_request_used() -> None:
    model = Held("first", "never shown")
    service, store, commit = harness(model, runs_per_user=1)
    first = await service.start(ALICE, "one")
    commit.armed = True
    send = asyncio.create_task(service.agent.send(ALICE, "two", None))
    await until(lambda: len(model.requests) == 2)
    model.answer[1].set()  # the model answered before the refusal came
    await until(lambda: model.read_out == 1)
    commit.gate.set()
    with pytest.raises(SlotsTaken):
        await send

    assert (await service.fakes.ledger.get("alice")).usage.tokens == 8
    assert list(store.writes) == [first.conversation_id]
    assert first.head_start is not None
    await first.head_start.discard()


async def test_a_failed_commit_cancels_the_request_and_shows_nothing() -> None:
    model = Held("never shown")
    service, store, commit = harness(model)
    commit.armed, commit.fail = True, StoreError("Firestore is unavailable.")
    send = asyncio.create_task(service.agent.send(ALICE, "hi", None))
    await commit.entered.wait()
    await until(lambda: len(model.requests) == 1)
    commit.gate.set()
    with pytest.raises(StoreError):
        await send

    assert model.cancelled == 1
    assert not store.writes
    # The admission was never written either: only the request's reservation, given
    # back as it was cancelled unanswered.
    assert await service.fakes.ledger.get("alice") == TaskLedger()


async def test_a_history_changed_meanwhile_asks_again_on_the_committed_one() -> None:
    model = Held("First.", "stale", "fresh")
    model.answer[0].set()
    service, store, commit = harness(model)
    sent = await service.agent.send(ALICE, "one", None)
    assert sent.run is not None
    await sent.run.execute(lambda _: None)
    conversation_id = sent.conversation_id

    commit.armed = True  # the send's commit waits
    send = asyncio.create_task(service.agent.send(ALICE, "two", conversation_id))
    await commit.entered.wait()
    await until(lambda: len(model.requests) == 2)
    # Meanwhile another process adds to the conversation.
    other = Message.model_validate(
        {
            "id": "msg_other",
            "role": "user",
            "createdAt": sent.run.record.started_at,
            "status": "complete",
            "content": [{"type": "text", "text": "from elsewhere"}],
        }
    )
    await InMemoryConversationStore.apply(
        store,
        "alice",
        conversation_id,
        lambda c: (c.model_copy(update={"messages": [*c.messages, other]}), None),
    )
    commit.gate.set()
    again = await send
    assert again.run is not None
    model.answer[2].set()
    frames: list[Frame] = []
    await again.run.execute(frames.append)

    assert texts(frames) == ["fresh"]
    assert model.cancelled == 1  # the guess's request, cancelled unseen
    assert [m.text for m in model.requests[1].messages] == ["one", "First.", "two"]
    assert [m.text for m in model.requests[2].messages] == [
        "one",
        "First.",
        "from elsewhere",
        "two",
    ]


class Paced:
    """A reply whose events come when the test lets them (``step``), recording the task
    that read each one and whether the stream was closed."""

    def __init__(self, *texts: str) -> None:
        self.texts = texts
        self.go = asyncio.Event()
        self.readers: list[asyncio.Task[Any] | None] = []
        self.closed = False

    async def stream(self) -> AsyncGenerator[ModelEvent, None]:
        try:
            for text in self.texts:
                await self.go.wait()
                self.go.clear()
                self.readers.append(asyncio.current_task())
                yield TextDelta(text)
            yield Finish("stop")
        finally:
            self.closed = True


async def test_a_taken_head_start_hands_the_stream_to_its_run() -> None:
    # Events kept before the take are replayed; once one more arrives the pump stops and
    # the run reads the rest itself, in its own task (one task switch less a token).
    reply = Paced("a", "b", "c")
    request = ModelRequest(system="s", messages=[])
    head = HeadStart(request, reply.stream())
    reply.go.set()
    await until(lambda: len(reply.readers) == 1)
    events = head.take(request)
    assert events is not None
    got: list[str] = []

    async def run() -> None:
        async for event in events:
            if isinstance(event, TextDelta):
                got.append(event.text)
                reply.go.set()

    reply.go.set()
    taker = asyncio.create_task(run())
    await asyncio.wait_for(taker, 30)  # (a net: it takes milliseconds)
    assert got == ["a", "b", "c"]
    assert reply.readers[1] is not taker  # read by the pump, which then handed over
    assert reply.readers[2] is taker
    assert reply.closed


async def test_a_run_that_stops_reading_after_the_handover_closes_the_request() -> None:
    reply = Paced("a", "b", "c")
    request = ModelRequest(system="s", messages=[])
    head = HeadStart(request, reply.stream())
    events = head.take(request)
    assert events is not None
    reply.go.set()
    first = await events.__anext__()
    assert first == TextDelta("a")
    reply.go.set()
    assert await events.__anext__() == TextDelta("b")  # read by the run itself
    await events.aclose()  # a stop: the request goes with it
    assert reply.closed


class GatedGets(InMemoryConversationStore):
    """A conversation store whose next full read (``arm``) waits until ``gate`` opens."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def get(self, user_id: str, conversation_id: str) -> Any:
        if self.armed:
            self.armed = False
            self.entered.set()
            await self.gate.wait()
        return await super().get(user_id, conversation_id)


async def test_the_screen_reads_beside_the_conversation_not_after_it() -> None:
    """A head start in an existing conversation reads it first (its guess); the egress's
    screen reads afresh before the request leaves: begun at once, beside that read, so
    the request waits one read's time, not two. Its read serves that request alone."""
    model = Held("First.", "Second.")
    model.answer[0].set()
    gets = GatedGets()
    fakes = Fakes(gets, InMemoryTaskLedgerStore())
    service = make_service(model, fakes=fakes)
    sent = await service.agent.send(ALICE, "one", None)
    assert sent.run is not None
    await sent.run.execute(lambda _: None)
    reads = fakes.provenance.reads

    gets.armed = True
    send = asyncio.create_task(service.agent.send(ALICE, "two", sent.conversation_id))
    await gets.entered.wait()
    await until(lambda: fakes.provenance.reads == reads + 1)
    assert len(model.requests) == 1  # the screen has read; the conversation has not
    gets.gate.set()
    await until(lambda: len(model.requests) == 2)
    assert fakes.provenance.reads == reads + 1  # the request took the read begun for it
    again = await send
    assert again.run is not None
    model.answer[1].set()
    frames: list[Frame] = []
    await again.run.execute(frames.append)
    assert texts(frames) == ["Second."]
    assert model.cancelled == 0
