"""Resume streams on one process: however many follow a conversation, each write is read
once, and only as much of it as a resume needs."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.agent.run.runs import finish_run, new_run, put_message
from shared.agent.stream.resume import resume_stream
from shared.schemas.documents import ActiveRun, ContentPart, Conversation, Message
from shared.store.base import RunProbe, RunView
from shared.store.memory import InMemoryConversationStore

NOW = datetime(2026, 3, 1, tzinfo=UTC)
UID = "alice"


def _message(n: int) -> Message:
    return Message(
        id=f"msg_{n}",
        role="user" if n % 2 == 0 else "assistant",
        created_at=NOW,
        status="complete",
        content=[ContentPart.of_text(f"message {n} " * 20)],
        run_id=None if n % 2 == 0 else f"run_{n}",
    )


async def _live(store: InMemoryConversationStore, history: int) -> tuple[str, ActiveRun]:
    run = new_run("run_live", "msg_reply", NOW, NOW, f"msg_{history}")
    conversation = Conversation(
        id="conv_1",
        participant_ids=[UID],
        created_at=NOW,
        updated_at=NOW,
        last_message_at=NOW,
        messages=[_message(n) for n in range(history + 1)],
        active_run=run,
    )
    await store.create(UID, conversation)
    return conversation.id, run


@contextlib.contextmanager
def validations(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts each ``model_validate`` of a conversation, a run or a message, by class."""
    counts: Counter[str] = Counter()
    for cls in (Conversation, ActiveRun, Message):
        original: Callable[..., Any] = cls.model_validate

        def spy(obj: Any, *args: Any, _cls: type = cls, _real: Any = original, **kw: Any) -> Any:
            counts[_cls.__name__] += 1
            return _real(obj, *args, **kw)

        monkeypatch.setattr(cls, "model_validate", spy)
    yield counts
    monkeypatch.undo()


async def _open(
    store: InMemoryConversationStore, conversation_id: str, streams: int
) -> list[AsyncIterator[bytes]]:
    """``streams`` resume streams of the live run, each past its replay."""
    # Polled never (an hour): only the shared listener's versions are counted.
    opened = [
        resume_stream(store, UID, conversation_id, "run_live", None, 15, poll_seconds=3600)
        for _ in range(streams)
    ]
    for stream in opened:
        assert b"event: run_start" in await anext(stream)
    return opened


async def _close(streams: list[AsyncIterator[bytes]]) -> None:
    for stream in streams:
        await stream.aclose()  # type: ignore[attr-defined]


async def _write_cost(monkeypatch: pytest.MonkeyPatch, streams: int) -> Counter[str]:
    """The validations one streaming write costs with ``streams`` resume streams open
    (the writer's own read included), until every stream has sent its text."""
    store = InMemoryConversationStore()
    conversation_id, run = await _live(store, history=40)
    opened = await _open(store, conversation_id, streams)
    assert run.message is not None
    reply = run.message.model_copy(update={"content": [ContentPart.of_text("Hello")]})
    with validations(monkeypatch) as counts:
        await store.mutate(UID, conversation_id, lambda c: put_message(c, "run_live", reply, NOW))
        for stream in opened:
            assert b'"content": "Hello"' in await anext(stream)
    await _close(opened)
    return counts


async def test_resume_streams_share_one_parse_of_each_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one = await _write_cost(monkeypatch, 1)
    many = await _write_cost(monkeypatch, 50)
    assert many == one
    # The writer reads the whole conversation; the followers read only the active run.
    assert one["Conversation"] == 1


async def test_a_finished_run_is_found_without_reading_the_whole_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = InMemoryConversationStore()
    conversation_id, run = await _live(store, history=40)
    opened = await _open(store, conversation_id, 20)
    assert run.message is not None
    final = run.message.model_copy(
        update={"content": [ContentPart.of_text("Done.")], "status": "complete"}
    )
    with validations(monkeypatch) as counts:
        await store.mutate(
            UID, conversation_id, lambda c: finish_run(c, "run_live", final, NOW, NOW)
        )
        for stream in opened:
            chunk = await anext(stream)
            assert b'"content": "Done."' in chunk and b"event: done" in chunk
    await _close(opened)
    # The finished reply and the user message it answers, read once for every stream.
    assert counts["Message"] <= 2
    assert counts["Conversation"] == 1  # the writer's


class SilentListener(InMemoryConversationStore):
    """A store whose listener delivers the document as it is, then falls silent without
    failing (as a Firestore listener did on the emulator of a loaded machine)."""

    def watch(self, user_id: str, conversation_id: str) -> AsyncGenerator[RunView | None, None]:
        real = super().watch(user_id, conversation_id)

        async def first_then_silence() -> AsyncGenerator[RunView | None, None]:
            async with contextlib.aclosing(real) as versions:
                yield await anext(versions)
                await asyncio.Event().wait()  # never set: nothing more ever comes
                yield None

        return first_then_silence()


class CountedReads(SilentListener):
    """A silent listener's store that counts the follower's fresh reads of each kind."""

    def __init__(self) -> None:
        super().__init__()
        self.probes = self.gets = 0
        self.five = asyncio.Event()  # set once five fresh reads were made, of either kind

    def _counted(self) -> None:
        if self.probes + self.gets >= 5:
            self.five.set()

    async def probe(self, user_id: str, conversation_id: str) -> RunProbe:
        self.probes += 1
        self._counted()
        return await super().probe(user_id, conversation_id)

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        self.gets += 1
        self._counted()
        return await super().get(user_id, conversation_id)


async def test_a_resume_ends_with_its_run_even_when_the_listener_falls_silent() -> None:
    """Only a fresh read can tell the stream the run ended (before, it waited for ever;
    the net is not the verdict). The read a resume makes every keep-alive is the run's
    probe: the whole conversation (up to a megabyte) is read once the run has ended."""
    store = CountedReads()
    conversation_id, run = await _live(store, history=2)
    stream = resume_stream(store, UID, conversation_id, "run_live", None, 15, poll_seconds=0.01)
    assert b"event: run_start" in await anext(stream)
    store.gets = 0
    store.five.clear()
    await store.five.wait()
    assert store.gets == 0
    assert run.message is not None
    reply = run.message.model_copy(
        update={"status": "complete", "content": [ContentPart.of_text("All done.")]}
    )
    await store.mutate(UID, conversation_id, lambda c: finish_run(c, "run_live", reply, NOW, NOW))
    rest = b"".join([chunk async for chunk in stream_within(stream, 60)])
    assert b"All done." in rest and b"event: done" in rest
    assert store.gets >= 1


async def stream_within(stream: AsyncIterator[bytes], seconds: float) -> AsyncIterator[bytes]:
    while True:
        try:
            yield await asyncio.wait_for(anext(stream), seconds)
        except StopAsyncIteration:
            return
