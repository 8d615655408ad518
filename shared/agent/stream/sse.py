"""Server-Sent Events framing of ``AgentEvent`` (one adapter, no web framework)."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, fields
from typing import Any

from shared.agent.stream.events import TERMINAL, UNSENT, AgentEvent, ErrorEvent, TextEvent
from shared.agent.stream.transcript import Cursor, Frame
from shared.errors import INTERNAL_MESSAGE

KEEPALIVE = b": keep-alive\n\n"

# The JSON string of a ``str`` (quoted, escaped, non-ASCII kept), as ``json.dumps`` with
# ``ensure_ascii=False`` writes it: the C function its encoder calls.
_json_string: Callable[[str], str] = json.encoder.encode_basestring


_WIRE_NAMES: dict[type[Any], tuple[tuple[str, str], ...]] = {}


def wire_names(cls: type[Any]) -> tuple[tuple[str, str], ...]:
    """(python name, camelCase name) of an event class's payload fields, cached."""
    names = _WIRE_NAMES.get(cls)
    if names is None:
        pairs = []
        for f in fields(cls):
            if f.name != "type" and f.metadata.get("wire", True):
                head, *rest = f.name.split("_")
                pairs.append((f.name, head + "".join(word.title() for word in rest)))
        names = _WIRE_NAMES[cls] = tuple(pairs)
    return names


def event_data(event: AgentEvent) -> dict[str, Any]:
    """The event's JSON payload, camelCase, without unset optionals."""
    data = {}
    for name, wire in wire_names(type(event)):
        value = getattr(event, name)
        if value is not None:
            data[wire] = value
    return data


def encode(frame: Frame) -> bytes:
    """One SSE frame: ``id`` (rebuildable from the document), ``event`` and a one-line
    JSON ``data``."""
    event = frame.event
    if type(event) is TextEvent:  # the hot path: one per token
        # What ``json.dumps({"content": ...}, ensure_ascii=False)`` writes, without
        # its encoder object and generator, once per token (bench/stream_overhead.py (c)).
        payload = '{"content": ' + _json_string(event.content) + "}"
    else:
        payload = json.dumps(event_data(event), ensure_ascii=False)
    return f"id: {frame.id}\nevent: {event.type}\ndata: {payload}\n\n".encode()


@dataclass(frozen=True, slots=True)
class Framing:
    """How a stream's frames are written: an encoder made afresh for each stream (one
    may remember what it wrote: ``uistream``'s does), and what ends the stream."""

    encoder: Callable[[], Callable[[Frame], bytes]]
    trailer: bytes = b""


SSE = Framing(lambda: encode)
"""Our own events (DESIGN §4)."""


class EventChannel:
    """Carries a run's frames to at most one listener, which may go away.

    The run never waits for the listener: ``emit`` only appends. A listener that
    disconnects stops reading and the run goes on.
    """

    def __init__(self, run_id: str = "") -> None:
        self._items: deque[Frame] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._run_id = run_id

    def emit(self, frame: Frame) -> None:
        event = frame.event
        if self._ended or type(event) in UNSENT:
            return
        if type(event) in TERMINAL:
            self._ended = True
        elif not self._run_id:
            self._run_id = Cursor.parse(frame.id).run_id
        self._items.append(frame)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def end(self) -> None:
        """Make sure a listener sees the stream end, even if the run died without saying so."""
        if not self._ended:
            error = ErrorEvent(message=INTERNAL_MESSAGE, code="internal")
            self.emit(Frame(Cursor.end_id(self._run_id), error))

    async def next_batch(self, idle_seconds: float) -> list[Frame]:
        """Every event emitted so far and not yet taken; empty after ``idle_seconds`` of silence."""
        if not self._items:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(idle_seconds, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        batch = list(self._items)
        self._items.clear()
        return batch


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def sse_stream(
    channel: EventChannel, keepalive: float, framing: Framing = SSE
) -> AsyncIterator[bytes]:
    """The SSE body: the channel's frames as ``framing`` writes them, ``: keep-alive``
    (a comment every reader skips) after ``keepalive`` seconds of silence, ending after
    the terminal event."""
    encoded = framing.encoder()
    while True:
        batch = await channel.next_batch(keepalive)
        if not batch:
            yield KEEPALIVE
            continue
        chunks = []
        for frame in batch:
            chunks.append(encoded(frame))
            if isinstance(frame.event, TERMINAL):
                yield b"".join(chunks) + framing.trailer
                return
        yield b"".join(chunks)
