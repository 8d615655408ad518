"""Resuming a run's stream from durable state, on any instance.

The client names the last event it saw (``Last-Event-ID``); the conversation document
holds the run (``activeRun`` while it lives, then its message in ``messages``), and
``transcript.replay`` turns that into the events the client missed, with the same ids
the live stream used. A Firestore listener then follows the document until the run
ends. No live producer, no shared memory and no Redis are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from shared.agent.events import ErrorEvent
from shared.agent.sse import EventChannel, sse_stream
from shared.agent.transcript import Cursor, Frame, replay
from shared.errors import StoreError
from shared.schemas.documents import Conversation, Message
from shared.store.base import ConversationStore

GONE = "This conversation no longer exists."


@dataclass(frozen=True, slots=True)
class Target:
    """The run a resume follows, and where it stands now."""

    run_id: str
    message: Message
    user_message_id: str | None


def locate(conversation: Conversation, run_id: str) -> Target | None:
    """The run ``run_id`` in ``conversation``: its in-flight or finished message."""
    run = conversation.active_run
    if run is not None and run.run_id == run_id and run.message is not None:
        return Target(run_id, run.message, run.user_message_id)
    messages = conversation.messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.run_id == run_id and message.role == "assistant":
            return Target(run_id, message, _asked_by(messages, index))
    return None


def _asked_by(messages: list[Message], index: int) -> str | None:
    """The user message a reply answers: the last one before it, unless another reply
    came between (a follow-up to tool results answers no user message)."""
    for earlier in reversed(messages[:index]):
        if earlier.role == "user":
            return earlier.id
        if earlier.role == "assistant":
            return None
    return None


def latest_run(conversation: Conversation) -> str | None:
    """The active run, or else the last one that wrote a message."""
    if conversation.active_run is not None:
        return conversation.active_run.run_id
    for message in reversed(conversation.messages):
        if message.role == "assistant" and message.run_id:
            return message.run_id
    return None


def pending(conversation: Conversation, run_id: str, after: Cursor | None) -> list[Frame]:
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
) -> None:
    cursor = after
    try:
        async with contextlib.aclosing(store.watch(user_id, conversation_id)) as snapshots:
            async for conversation in snapshots:
                target = None if conversation is None else locate(conversation, run_id)
                if target is None:
                    channel.emit(Frame(f"{run_id}:end", ErrorEvent(GONE, "not_found")))
                    return
                frames = replay(target.message, conversation_id, target.user_message_id, cursor)
                for frame in frames:
                    channel.emit(frame)
                if frames:
                    cursor = Cursor.parse(frames[-1].id)
                if target.message.status != "streaming":
                    return
    except StoreError as exc:
        # The client reconnects with its Last-Event-ID; nothing it saw is lost.
        channel.emit(Frame(f"{run_id}:end", ErrorEvent(exc.message, exc.code)))


async def resume_stream(
    store: ConversationStore,
    user_id: str,
    conversation_id: str,
    run_id: str,
    after: Cursor | None,
    keepalive: float,
) -> AsyncIterator[bytes]:
    """The SSE body of a resume: the missed events, then the run's new ones as the
    document changes, ending with ``done`` or ``error``. A client that goes away stops
    the listener; the run itself is never affected."""
    channel = EventChannel(run_id)
    follower = asyncio.create_task(
        _follow(store, user_id, conversation_id, run_id, after, channel),
        name=f"resume-{run_id}",
    )
    follower.add_done_callback(lambda _: channel.end())
    try:
        async for chunk in sse_stream(channel, keepalive):
            yield chunk
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await follower
