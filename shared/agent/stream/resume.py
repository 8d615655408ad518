"""Resuming a run's stream from durable state, on any instance.

The client names the last event it saw (``Last-Event-ID``); the conversation document
holds the run (``activeRun`` while it lives, then its message in ``messages``), and
``replay`` (``replay.py``) turns that into the events the client missed, with the same
ids the live stream used. A Firestore listener then follows the document until the run
ends (one per conversation per process, shared by all its resume streams: ``watch``).
No live producer, no shared memory and no Redis are needed. ``Resumes`` caps the
streams one user holds open on one instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from shared.agent.stream.events import ErrorEvent
from shared.agent.stream.replay import replay
from shared.agent.stream.sse import SSE, EventChannel, Framing, sse_stream
from shared.agent.stream.transcript import END, Cursor, Frame
from shared.errors import NotFound, RateLimited, RequestError, StoreError
from shared.schemas.documents import Message
from shared.store.base import ConversationStore, RunView

GONE = "This conversation no longer exists."


@dataclass(frozen=True, slots=True)
class Target:
    """The run a resume follows, and where it stands now."""

    run_id: str
    message: Message
    user_message_id: str | None


def locate(conversation: RunView, run_id: str) -> Target | None:
    """The run ``run_id`` in ``conversation``: its in-flight or finished message (read
    from the newest back: a finished run is almost always the last message or two)."""
    run = conversation.active_run
    if run is not None and run.run_id == run_id and run.message is not None:
        return Target(run_id, run.message, run.user_message_id)
    messages = conversation.messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.run_id == run_id and message.role == "assistant":
            return Target(run_id, message, _asked_by(messages, index))
    return None


def _asked_by(messages: Sequence[Message], index: int) -> str | None:
    """The user message a reply answers: the last one before it, unless another reply
    came between (a follow-up to tool results answers no user message)."""
    for earlier in range(index - 1, -1, -1):
        message = messages[earlier]
        if message.role == "user":
            return message.id
        if message.role == "assistant":
            return None
    return None


def latest_run(conversation: RunView) -> str | None:
    """The active run, or else the last one that wrote a message."""
    if conversation.active_run is not None:
        return conversation.active_run.run_id
    for message in reversed(conversation.messages):
        if message.role == "assistant" and message.run_id:
            return message.run_id
    return None


def pending(conversation: RunView, run_id: str, after: Cursor | None) -> list[Frame]:
    """What a client that saw up to ``after`` has not been sent yet of ``run_id``."""
    target = locate(conversation, run_id)
    if target is None:
        return []
    return replay(target.message, conversation.id, target.user_message_id, after)


async def _follow(
    store: ConversationStore,
    user_id: str,
    conversation_id: str,
    run_id: str,
    after: Cursor | None,
    channel: EventChannel,
    poll_seconds: float,
) -> None:
    """Follow the document until the run ends, from its listener, and from a fresh read
    every ``poll_seconds``: a listener can fall silent without failing (seen on the
    emulator of a loaded machine: the run's end never came, and the stream waited for
    it forever). The fresh read is the run's probe (its id and status, no messages):
    the whole conversation, up to a megabyte, is read only once the run it follows has
    ended or given way, which is what a silent listener would miss."""
    versions: asyncio.Queue[RunView | StoreError | None] = asyncio.Queue()

    async def listen() -> None:
        try:
            async with contextlib.aclosing(store.watch(user_id, conversation_id)) as snapshots:
                async for conversation in snapshots:
                    versions.put_nowait(conversation)
        except StoreError as exc:
            versions.put_nowait(exc)

    async def poll() -> None:
        while True:
            await asyncio.sleep(poll_seconds)
            with contextlib.suppress(StoreError):  # the listener's own failure says it
                try:
                    probe = await store.probe(user_id, conversation_id)
                except NotFound:
                    versions.put_nowait(None)
                    continue
                if probe.run_id == run_id:
                    continue  # still going: its pieces are the listener's to bring
                stored = await store.get(user_id, conversation_id)
                versions.put_nowait(None if stored is None else RunView.of(stored))

    sources = [asyncio.create_task(listen()), asyncio.create_task(poll())]
    cursor = after
    try:
        while True:
            conversation = await versions.get()
            if isinstance(conversation, StoreError):
                # The client reconnects with its Last-Event-ID; nothing it saw is lost.
                channel.emit(
                    Frame(
                        Cursor.end_id(run_id), ErrorEvent(conversation.message, conversation.code)
                    )
                )
                return
            target = None if conversation is None else locate(conversation, run_id)
            if target is None:
                channel.emit(Frame(Cursor.end_id(run_id), ErrorEvent(GONE, "not_found")))
                return
            # An older version read after a newer one adds nothing: replay sends only
            # what comes after ``cursor``.
            frames = replay(target.message, conversation_id, target.user_message_id, cursor)
            for frame in frames:
                channel.emit(frame)
            if frames:
                cursor = Cursor.parse(frames[-1].id)
            if target.message.status != "streaming":
                return
    finally:
        for source in sources:
            source.cancel()
        await asyncio.gather(*sources, return_exceptions=True)


async def resume_stream(
    store: ConversationStore,
    user_id: str,
    conversation_id: str,
    run_id: str,
    after: Cursor | None,
    keepalive: float,
    ended: Callable[[], None] | None = None,
    framing: Framing = SSE,
    poll_seconds: float | None = None,
) -> AsyncIterator[bytes]:
    """The SSE body of a resume: the missed events, then the run's new ones as the
    document changes, ending with ``done`` or ``error``. A client that goes away stops
    following (``ended`` is called); the run itself is never affected. The document is
    also read afresh every ``poll_seconds`` (the keep-alive's, unless given)."""
    channel = EventChannel(run_id)
    follower = asyncio.create_task(
        _follow(
            store,
            user_id,
            conversation_id,
            run_id,
            after,
            channel,
            keepalive if poll_seconds is None else poll_seconds,
        ),
        name=f"resume-{run_id}",
    )
    follower.add_done_callback(lambda _: channel.end())
    try:
        async for chunk in sse_stream(channel, keepalive, framing):
            yield chunk
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await follower
        if ended is not None:
            ended()


class Resumes:
    """The resume streams this process serves: at most ``per_user`` open for each user.

    An open stream holds a follower of its conversation's listener and a response; a
    client that reconnects in a loop (or many tabs) would otherwise hold any number. A
    stream whose client left is noticed when its next keep-alive cannot be sent, so a
    refused client is told to retry after one keep-alive.
    """

    def __init__(self, store: ConversationStore, keepalive: int, per_user: int) -> None:
        self._store = store
        self._keepalive = keepalive
        self._per_user = per_user
        self._open: dict[str, int] = {}

    def check(self, user_id: str) -> None:
        """Refuse a user who has all their streams open.

        Raises:
            RateLimited: ``per_user`` of this user's streams are open here.
        """
        if self._open.get(user_id, 0) >= self._per_user:
            raise RateLimited(
                f"You are already following {self._per_user} replies at once; close one, "
                f"then try again (one you left closes within {self._keepalive} seconds).",
                self._keepalive,
                limit="resume_streams",
            )

    async def start(
        self,
        user_id: str,
        conversation_id: str,
        last_event_id: str | None,
        framing: Framing = SSE,
        *,
        live_only: bool = False,
    ) -> AsyncIterator[bytes] | None:
        """The body of a resume of the conversation's active (or last) run from
        ``last_event_id``, or ``None`` when there is nothing to send: nothing ran, the
        client saw the end, or the run ended with nothing the client missed; with
        ``live_only`` (the AI SDK's resume), also when no run is active.

        Raises:
            RateLimited: as ``check`` (judged before any work).
            NotFound: no such conversation for this user.
            RequestError: ``last_event_id`` is not an id this API sent, or names a run
                the conversation does not have.
        """
        self.check(user_id)  # before any work; ``open`` counts it
        stored = await self._store.get(user_id, conversation_id)
        if stored is None:
            raise NotFound("No conversation with this id.")
        conversation = RunView.of(stored)
        after = Cursor.parse(last_event_id) if last_event_id else None
        run_id = after.run_id if after is not None else latest_run(conversation)
        if run_id is None or (after is not None and after.at == END):
            return None  # nothing ran, or the client saw the end
        active = conversation.active_run
        live = active is not None and active.run_id == run_id
        if live_only and not live:
            return None
        if not live and not pending(conversation, run_id, after):
            if after is not None and locate(conversation, run_id) is None:
                raise RequestError("Last-Event-ID names a run this conversation does not have.")
            return None
        return self.open(user_id, conversation_id, run_id, after, framing)

    def open(
        self,
        user_id: str,
        conversation_id: str,
        run_id: str,
        after: Cursor | None,
        framing: Framing = SSE,
    ) -> AsyncIterator[bytes]:
        """The body of a new resume stream, counted against ``user_id`` until it ends.

        Raises:
            RateLimited: as ``check``.
        """
        self.check(user_id)
        self._open[user_id] = self._open.get(user_id, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                left = self._open.pop(user_id) - 1
                if left:
                    self._open[user_id] = left

        body = resume_stream(
            self._store, user_id, conversation_id, run_id, after, self._keepalive, release, framing
        )
        # A response dropped before its body started never runs the body's ``finally``.
        weakref.finalize(body, release)
        return body
