"""An AI SDK chat's body (``POST /api/spark/agent/chat``), read as it arrives and by its
shape.

The transport posts the whole conversation, files as ``data:`` URLs, up to 32 MiB. Read
whole and parsed with ``json``, such a body became up to 40 times its size in objects
(1.5-1.9 GiB for 32 MiB of small elements in a field the server ignores) and stalled
every stream of the instance while it was parsed, walked and validated on the event
loop. So here:

* the body is parsed as it arrives by a streaming parser (ijson's C backend), a slice at
  a time in a worker thread, and only what ``ChatRequest`` reads is built (its fields by
  their aliases, so the two cannot drift): anything else is skipped, never made into
  objects; an earlier message keeps only what validating it needs (not its text, files'
  URLs or tools' outputs: ``turn`` reads the newest message alone);
* nesting deeper than ``MAX_DEPTH``, more than ``MAX_VALUES`` values, more messages or
  parts than ``uichat``'s caps, or a tool's output that cannot be within
  ``MAX_CLIENT_OUTPUT_BYTES`` are refused as soon as they are seen;
* the bodies one process reads at once are held to a byte budget
  (``SPARK_CHAT_BODY_BUDGET_BYTES``, ``budget.ByteBudget``, held by the route).

Numbers are read as 64-bit integers or floats: a longer integer is refused as not valid
JSON (ijson's C backend crashes the process on an integer of thousands of digits when
it is asked for Python's arbitrary ones).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import ijson
from ijson.common import ObjectBuilder
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from shared.errors import PayloadTooLarge, RequestError
from shared.schemas.api.common import MAX_CLIENT_OUTPUT_BYTES
from shared.schemas.uichat import (
    MAX_BODY_PARTS,
    MAX_MESSAGES,
    MAX_PARTS,
    ChatRequest,
    UiApproval,
    UiMessage,
    UiPart,
)
from spark_http.problems import invalid_body
from spark_http.requests import MAX_DEPTH, TOO_DEEP, json_only, too_large

MAX_VALUES = 1_000_000
"""Values one chat body may hold (each string, number, true, false, null, object and
array counts one): a bound on the parser's work whatever the body's fields."""

# A JSON value takes at least two bytes in an array ("0,"): an output of more values
# cannot be within MAX_CLIENT_OUTPUT_BYTES.
MAX_OUTPUT_VALUES = MAX_CLIENT_OUTPUT_BYTES // 2 + 1
# The parser is fed this much at a time: the events of a slice are held until handled.
_SLICE = 64 * 1024
# Bytes gathered from the request before a worker thread parses them.
_BATCH = 256 * 1024
_OPEN = frozenset(("start_map", "start_array"))
_CLOSE = frozenset(("end_map", "end_array"))
# What an earlier message's parts need not keep.
_HEAVY = ("text", "url", "output")
_OVERSIZED = object()

NOT_JSON = "The request body is not valid JSON."
NOT_OBJECT = "The request body must be a JSON object."
TOO_MANY_VALUES = (
    f"The request body holds more than {MAX_VALUES:,} values (each string, number, true, "
    "false, null, object and array counts one)."
)


def _fields(model: type[BaseModel], *but: str) -> list[str]:
    return [i.alias or n for n, i in model.model_fields.items() if (i.alias or n) not in but]


def _routes() -> dict[str, str]:
    """Each path the body is read at (as ijson spells a prefix: ``messages.item.id``), with
    what is read there; every other path is skipped."""
    message, part = "messages.item", "messages.item.parts.item"
    routes = {
        "": "root",
        "messages": "messages",
        message: "message",
        f"{message}.parts": "parts",
        part: "part",
        f"{part}.output": "output",
        f"{part}.approval": "approval",
    }
    routes |= dict.fromkeys(_fields(ChatRequest, "messages"), "field")
    routes |= dict.fromkeys((f"{message}.{k}" for k in _fields(UiMessage, "parts")), "field")
    fields = _fields(UiPart, "output", "approval")
    routes |= dict.fromkeys((f"{part}.{k}" for k in fields), "field")
    routes |= dict.fromkeys((f"{part}.approval.{k}" for k in _fields(UiApproval)), "field")
    return routes


_ROUTES = _routes()
# The paths read inside each path read, by key ("item": an array's element).
_CHILDREN: dict[str, dict[str, str]] = {}
for _path in _ROUTES:
    if _path:
        _parent, _, _key = _path.rpartition(".")
        _CHILDREN.setdefault(_parent, {})[_key] = _path
_ARRAYS = frozenset(("messages", "messages.item.parts"))
_MAPS = frozenset(
    ("", "messages.item", "messages.item.parts.item", "messages.item.parts.item.approval")
)


class _Body:
    """The body's parse: fed bytes, it builds the dict ``ChatRequest`` validates."""

    def __init__(self) -> None:
        self._events: list[tuple[str, Any]] = ijson.sendable_list()
        self._parser = ijson.basic_parse_coro(self._events, use_float=True)
        self._stack: list[str | None] = []
        self._key = ""
        self._values = 0
        self._parts = 0
        self._root: dict[str, Any] | None = None
        # Where the fields read next go, by the route that holds them.
        self._into: dict[str, dict[str, Any]] = {}
        self._messages: list[Any] = []
        self._parts_of: list[Any] = []
        self._output: ObjectBuilder | None = None
        self._output_level = 0
        self._built = 0
        self._handlers: dict[str, Callable[[str, str, Any], None]] = {
            "root": self._at_root,
            "messages": self._at_messages,
            "message": self._at_message,
            "parts": self._at_parts,
            "part": self._at_part,
            "output": self._at_output,
            "approval": self._at_approval,
            "field": self._at_field,
        }

    def feed(self, data: bytes) -> None:
        """Parse ``data``, the body's next bytes.

        Raises:
            RequestError, PayloadTooLarge: as soon as the body breaks a bound.
        """
        for at in range(0, len(data), _SLICE):
            self._send(data[at : at + _SLICE])

    def end(self) -> dict[str, Any]:
        """The body read, for ``ChatRequest`` to validate.

        Raises:
            RequestError: the body is not a whole JSON object.
            PayloadTooLarge: the newest message holds a tool output past its bound.
        """
        self._send(None)
        if self._root is None:
            raise RequestError(NOT_OBJECT)
        newest = self._messages[-1] if self._messages else None
        parts = newest.get("parts") if isinstance(newest, dict) else None
        if isinstance(parts, list) and any(
            isinstance(p, dict) and p.get("output") is _OVERSIZED for p in parts
        ):
            raise PayloadTooLarge(
                f"A tool's output must be at most {MAX_CLIENT_OUTPUT_BYTES // 1024} KiB "
                f"({MAX_CLIENT_OUTPUT_BYTES:,} bytes) as JSON."
            )
        return self._root

    def _send(self, data: bytes | None) -> None:
        try:
            if data is None:
                self._parser.close()
            else:
                self._parser.send(data)
        except (ijson.JSONError, ValueError):
            # ValueError: bytes that are not UTF-8, a number past 64 bits.
            raise RequestError(NOT_JSON) from None
        try:
            self._take(self._events)
        finally:
            del self._events[:]

    def _take(self, events: list[tuple[str, Any]]) -> None:
        """The parser's events, each where the path it is at says. The path is kept here
        (``_stack``: each open container's path if it is read, else ``None``), not asked
        of ijson: its prefixes join every key above a value, so long keys nested deep
        cost their length times the depth, per event."""
        stack = self._stack
        for event, value in events:
            if event == "map_key":
                if self._output is None:
                    self._key = value
                else:
                    self._build(event, value)
                continue
            if event in _CLOSE:
                stack.pop()
                if self._output is not None:
                    self._build(event, value)
                continue
            self._values += 1
            if self._values > MAX_VALUES:
                raise PayloadTooLarge(TOO_MANY_VALUES)
            where = self._where() if self._output is None else None
            if event in _OPEN:
                if len(stack) >= MAX_DEPTH:
                    raise RequestError(TOO_DEEP)
                # A container read where the other kind is read is skipped (and refused).
                read = where in (_ARRAYS if event == "start_array" else _MAPS)
                stack.append(where if read else None)
            if self._output is not None:
                self._build(event, value)
            elif where is not None:
                self._handlers[_ROUTES[where]](where, event, value)

    def _where(self) -> str | None:
        """The path of the value that comes next, if it is read."""
        if not self._stack:
            return ""
        top = self._stack[-1]
        if top is None:
            return None
        return _CHILDREN[top].get("item" if top in _ARRAYS else self._key)

    def _opened(self, prefix: str, event: str, value: Any) -> Any:
        """What is read at ``prefix``: an object, whose fields are read into it next."""
        if event != "start_map":
            return _held(event, value)
        fields: dict[str, Any] = {}
        self._into[prefix] = fields
        return fields

    def _at_root(self, prefix: str, event: str, value: Any) -> None:
        if event != "start_map":
            raise RequestError(NOT_OBJECT)
        self._root = self._opened(prefix, event, value)

    def _at_messages(self, prefix: str, event: str, value: Any) -> None:
        assert self._root is not None
        if event == "start_array":
            self._messages = []
        self._root["messages"] = self._messages if event == "start_array" else _held(event, value)

    def _at_message(self, prefix: str, event: str, value: Any) -> None:
        if len(self._messages) >= MAX_MESSAGES:
            raise RequestError(f"A chat can send at most {MAX_MESSAGES:,} messages.")
        if self._messages and isinstance(self._messages[-1], dict):
            _lighten(self._messages[-1])
        self._messages.append(self._opened(prefix, event, value))

    def _at_parts(self, prefix: str, event: str, value: Any) -> None:
        parts: Any = [] if event == "start_array" else _held(event, value)
        self._into["messages.item"]["parts"] = parts
        self._parts_of = parts if isinstance(parts, list) else []

    def _at_part(self, prefix: str, event: str, value: Any) -> None:
        self._parts += 1
        if len(self._parts_of) >= MAX_PARTS:
            raise RequestError(f"A message can have at most {MAX_PARTS} parts.")
        if self._parts > MAX_BODY_PARTS:
            raise RequestError(
                f"A chat's messages can have at most {MAX_BODY_PARTS:,} parts together."
            )
        self._parts_of.append(self._opened(prefix, event, value))

    def _at_approval(self, prefix: str, event: str, value: Any) -> None:
        approval = self._opened(prefix, event, value)
        self._into["messages.item.parts.item"]["approval"] = approval

    def _at_field(self, prefix: str, event: str, value: Any) -> None:
        holder, _, name = prefix.rpartition(".")
        self._into[holder][name] = _held(event, value)

    def _at_output(self, prefix: str, event: str, value: Any) -> None:
        if event not in _OPEN:
            self._into["messages.item.parts.item"]["output"] = value
            return
        self._output = ObjectBuilder()
        self._output.event(event, value)
        self._output_level, self._built = len(self._stack) - 1, 1

    def _build(self, event: str, value: Any) -> None:
        """The next event of a tool's output: built, up to ``MAX_OUTPUT_VALUES``."""
        output = self._output
        assert output is not None
        if self._built <= MAX_OUTPUT_VALUES:
            output.event(event, value)
            if event != "map_key" and event not in _CLOSE:
                self._built += 1
                if self._built > MAX_OUTPUT_VALUES:
                    output.value, output.containers = None, []  # let what was built go
        if event in _CLOSE and len(self._stack) == self._output_level:
            whole = output.value if self._built <= MAX_OUTPUT_VALUES else _OVERSIZED
            self._into["messages.item.parts.item"]["output"] = whole
            self._output = None


def _held(event: str, value: Any) -> Any:
    """A scalar read where one is read; an object or array there is kept empty (its
    contents are never built), for ``ChatRequest`` to refuse by its type."""
    if event == "start_map":
        return {}
    return [] if event == "start_array" else value


def _lighten(message: dict[str, Any]) -> None:
    """An earlier message without what only the newest one's reading needs."""
    parts = message.get("parts")
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict):
            for name in _HEAVY:
                part.pop(name, None)


# While a worker thread parses, the event loop waits for the GIL each time it wakes (a
# stream's next piece to send) until the worker is asked to let go: every switch
# interval, 5 ms by default. A shorter one while a body is parsed keeps the other
# streams' pace; the parse pays a few more switches.
_PARSING_SWITCH_SECONDS = 0.0005
T = TypeVar("T")
_parsing = 0
_switch = sys.getswitchinterval()


@contextmanager
def _parsing_beside_streams() -> Iterator[None]:
    """The switch interval short while any body is parsed in a worker (entered and left
    on the event loop's thread only, so the count needs no lock)."""
    global _parsing, _switch
    if _parsing == 0:
        _switch = sys.getswitchinterval()
        sys.setswitchinterval(min(_switch, _PARSING_SWITCH_SECONDS))
    _parsing += 1
    try:
        yield
    finally:
        _parsing -= 1
        if _parsing == 0:
            sys.setswitchinterval(_switch)


async def _parsed(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in a worker thread, beside the streams (``_parsing_beside_streams``)."""
    with _parsing_beside_streams():
        return await asyncio.to_thread(work, *args)


async def read_chat(request: Request, limit: int) -> ChatRequest:
    """The chat body, parsed as it arrives, at most ``limit`` bytes.

    Raises:
        UnsupportedMediaType, PayloadTooLarge, RequestError: with a message saying why.
    """
    json_only(request)
    body, size, batch, batched = _Body(), 0, list[bytes](), 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(too_large(limit))
        batch.append(chunk)
        batched += len(chunk)
        if batched >= _BATCH:
            # One chunk is fed as it is (a join of one is the chunk itself, uncopied).
            await _parsed(body.feed, b"".join(batch))
            batch, batched = [], 0
    if batch:
        await _parsed(body.feed, b"".join(batch))
    data = await _parsed(body.end)
    del body  # the parser, and its copy of the longest string it gathered (a file's URL)
    try:
        return await _parsed(ChatRequest.model_validate, data)
    except ValidationError as exc:
        raise invalid_body(ChatRequest, exc) from None
