"""The one reducer of a run's events into its message.

The live stream, the persisted document and the resume endpoint all go through here,
so what a client is sent and what Firestore holds can never disagree:
``Transcript.apply`` folds each event the loop emits into the message being written
and returns the event's id; ``replay`` (``shared/agent/stream/replay.py``) turns a stored
message back into the same events with the same ids.

An event id is ``{runId}:{parts}:{chars}``: the number of content parts the message
has once the event is folded in, and the length of its last part's text when that part
is text. It grows with every event that is sent, and any instance can compute it from
the document. The terminal event's id is ``{runId}:end``.

``Transcript`` mutates its own buffers rather than returning new messages: it runs once
per token, and copying the message per token would cost more than the rest of the path.
It does no I/O and depends on nothing but its events, so it is deterministic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from shared.agent.stream.events import (
    TERMINAL,
    AgentEvent,
    ApprovalRequiredEvent,
    DoneEvent,
    DoneStatus,
    ErrorEvent,
    ModeratedEvent,
    QuestionEvent,
    TaskQueuedEvent,
    TextEvent,
    ToolEndEvent,
    ToolStartEvent,
    UsageEvent,
)
from shared.errors import ModerationUnavailable, RequestError
from shared.schemas.api import EVENT_ID_PATTERN
from shared.schemas.documents import (
    ContentPart,
    FinishReason,
    Message,
    MessageError,
    MessageStatus,
    Moderated,
    StepState,
    ToolCall,
    ToolCallStatus,
    ToolResult,
    Usage,
)
from shared.tools.descriptions import describe_call

STOPPED = "The user stopped the reply before this tool finished."
CANCELLED = "Cancelled: the reply ended before this started."
FAILED = "The reply failed before this tool finished."

_ID = re.compile(EVENT_ID_PATTERN)


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """How much of a message an event leaves the client with."""

    parts: int
    chars: int


END: Literal["end"] = "end"


@dataclass(frozen=True, slots=True)
class Cursor:
    """An event id, parsed: the run and how far into its message (``end``: all of it).

    The one place an event id is written (``event_id``, ``end_id``) and read (``parse``).
    """

    run_id: str
    at: Position | Literal["end"]

    @staticmethod
    def event_id(run_id: str, parts: int, chars: int) -> str:
        """The id of an event that leaves the client with ``parts`` content parts, the
        last of them ``chars`` characters of text (0 when it is not text). A plain
        function of three values, with no cursor built: it runs once per token."""
        return f"{run_id}:{parts}:{chars}"

    @staticmethod
    def end_id(run_id: str) -> str:
        """The id of the run's terminal event (``done`` or ``error``)."""
        return f"{run_id}:{END}"

    def __str__(self) -> str:
        if self.at == END:
            return Cursor.end_id(self.run_id)
        return Cursor.event_id(self.run_id, self.at.parts, self.at.chars)

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor an event id names.

        Raises:
            RequestError: not an id this API ever sent.
        """
        match = _ID.match(text.strip())
        if match is None:
            raise RequestError("Last-Event-ID is not an event id this API sent.")
        run, parts, chars = match.groups()
        if parts is None:
            return cls(run, END)
        return cls(run, Position(int(parts), int(chars)))


@dataclass(frozen=True, slots=True)
class Frame:
    """One event and its id, as sent."""

    id: str
    event: AgentEvent


Emit = Callable[[Frame], None]
"""Where a run sends its frames as they happen (a client's channel, or nowhere)."""


def args_of(args_json: str) -> dict[str, object]:
    """The arguments shown in ``tool_start``: the call's JSON object, or ``{}`` when the
    model sent something else (a bad call is shown, and replayed, the same way)."""
    try:
        args = json.loads(args_json or "{}")
    except json.JSONDecodeError:
        return {}
    return args if isinstance(args, dict) else {}


def position_of(content: list[ContentPart]) -> Position:
    last = content[-1] if content else None
    chars = len(last.text or "") if last is not None and last.type == "text" else 0
    return Position(len(content), chars)


def _result_part(event: ToolEndEvent) -> ContentPart:
    return ContentPart(
        type="tool_result",
        tool_result=ToolResult(
            tool_call_id=event.id,
            output_json=event.output_json,
            status="ok" if event.status == "success" else "error",
            document_id=event.document_id,
            document_version=event.version,
        ),
        description=event.description,
    )


_OPENS_A_CALL = (ToolStartEvent, QuestionEvent, ApprovalRequiredEvent, TaskQueuedEvent)


def _opened_call(
    event: ToolStartEvent | QuestionEvent | ApprovalRequiredEvent | TaskQueuedEvent,
) -> ContentPart:
    """The ``tool_call`` part an event adds, in the state it starts in."""
    status: ToolCallStatus
    if isinstance(event, ToolStartEvent):
        # A client tool waits for the client; the server's own tools run now.
        status = "pending" if event.execution == "client" else "running"
        call_id, execution = event.id, event.execution
    elif isinstance(event, QuestionEvent):
        call_id, execution, status = event.tool_call_id, "question", "pending"
    elif isinstance(event, ApprovalRequiredEvent):
        call_id, execution, status = event.tool_call_id, event.execution, "awaiting_approval"
    else:
        call_id, execution, status = event.tool_call_id, "task", "queued"
    call = {
        "id": call_id,
        "name": event.tool,
        "args_json": event.args_json,
        "display_text": event.display_text,
        "execution": execution,
        "status": status,
        "approval": True if isinstance(event, ApprovalRequiredEvent) else None,
    }
    described = describe_call(event.tool, event.args_json)
    return ContentPart(
        type="tool_call", tool_call=ToolCall.model_validate(call), description=described
    )


_END_STATUS: dict[str, ToolCallStatus] = {"success": "complete", "error": "error"}
_DONE_STATUS: dict[DoneStatus, MessageStatus] = {
    "complete": "complete",
    "queued": "complete",
    "waiting": "waiting",
    "stopped": "stopped",
}


class Transcript:
    """A run's message, built by folding the run's events in order."""

    def __init__(self, message: Message) -> None:
        assert message.run_id is not None
        self._message = message
        self._run_id = message.run_id
        self._parts: list[ContentPart] = list(message.content)
        self._text: list[str] = []
        self._chars = 0
        self._status: MessageStatus = message.status
        self._error: MessageError | None = message.error
        self._usage: Usage | None = message.usage
        self._finish: FinishReason | None = message.finish_reason
        self._states: list[StepState] = list(message.provider_state or ())
        self._moderated: Moderated | None = message.moderated

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def position(self) -> Position:
        if self._text:
            return Position(len(self._parts) + 1, self._chars)
        return position_of(self._parts)

    @property
    def has_content(self) -> bool:
        return bool(self._parts or self._text)

    def _close_text(self) -> None:
        if self._text:
            self._parts.append(ContentPart.of_text("".join(self._text)))
            self._text, self._chars = [], 0

    def _find_call(self, call_id: str) -> int | None:
        for index, part in enumerate(self._parts):
            if part.tool_call is not None and part.tool_call.id == call_id:
                return index
        return None

    def apply(self, event: AgentEvent) -> str:
        """Fold ``event`` into the message; returns its event id."""
        if type(event) is TextEvent:  # the hot path: one per token
            if event.content:
                if not self._text and self._parts and self._parts[-1].type == "text":
                    last = self._parts.pop().text or ""
                    self._text, self._chars = [last], len(last)
                self._text.append(event.content)
                self._chars += len(event.content)
            if self._text:
                return Cursor.event_id(self._run_id, len(self._parts) + 1, self._chars)
        elif isinstance(event, ToolEndEvent):
            self._end_call(event)
        elif isinstance(event, _OPENS_A_CALL):
            self._close_text()
            self._parts.append(_opened_call(event))
        elif isinstance(event, UsageEvent):
            usage = self._usage or Usage()
            self._usage = Usage(
                input_tokens=usage.input_tokens + event.input_tokens,
                output_tokens=usage.output_tokens + event.output_tokens,
                cached_input_tokens=usage.cached_input_tokens + event.cached_input_tokens,
            )
            self._finish = event.finish_reason
            if event.state is not None:
                self._states.append(event.state)
        elif isinstance(event, ModeratedEvent):
            self._moderated = Moderated(direction=event.direction, category=event.category)
            if event.direction == "output":  # what had streamed goes: a note stays
                self._replace_text(WITHHELD_IN_DOCUMENT)
        elif isinstance(event, DoneEvent):
            self._status = _DONE_STATUS[event.status]
            if event.status == "stopped":
                self._finish = "stopped"
        elif isinstance(event, ErrorEvent):
            self._end_in_error(event)
        if isinstance(event, TERMINAL):
            return Cursor.end_id(self._run_id)
        position = self.position
        return Cursor.event_id(self._run_id, position.parts, position.chars)

    def _end_in_error(self, event: ErrorEvent) -> None:
        streamed = self._text or any(p.type == "text" for p in self._parts)
        if event.code == UNJUDGED and streamed:
            # Moderation failed closed half way: what had streamed was never judged.
            self._replace_text(UNJUDGED_IN_DOCUMENT)
        self._status = "withheld" if event.code == WITHHELD else "error"
        self._error = MessageError(code=event.code, message=event.message)
        self._finish = "error"

    def _replace_text(self, note: str) -> None:
        """The reply's text, as streamed so far, replaced by ``note``."""
        self._text, self._chars = [], 0
        self._parts = [p for p in self._parts if p.type != "text"]
        self._parts.append(ContentPart.of_text(note))

    def _end_call(self, event: ToolEndEvent) -> None:
        self._close_text()
        index = self._find_call(event.id)
        if index is not None:
            part = self._parts[index]
            assert part.tool_call is not None
            status = event.call_status or _END_STATUS[event.status]
            call = part.tool_call.model_copy(update={"status": status})
            self._parts[index] = part.model_copy(update={"tool_call": call})
        self._parts.append(_result_part(event))

    def closing_events(self, outcome: Literal["stopped", "error"]) -> list[ToolEndEvent]:
        """The ``tool_end`` events that give every call still open a result before the
        run ends, so no later turn meets a call without its result: an inline call that
        was running ends as an error, a task call never handed over is cancelled."""
        answered = {p.tool_result.tool_call_id for p in self._parts if p.tool_result is not None}
        events = []
        for part in self._parts:
            call = part.tool_call
            if call is None or call.id in answered:
                continue
            task = call.execution == "task"
            why = CANCELLED if task else STOPPED if outcome == "stopped" else FAILED
            events.append(
                ToolEndEvent(
                    call.id,
                    "error",
                    error=why,
                    output_json=json.dumps({"error": why}),
                    call_status="cancelled" if task else None,
                )
            )
        return events

    def message(self) -> Message:
        """The message as folded so far."""
        content = list(self._parts)
        if self._text:
            content.append(ContentPart.of_text("".join(self._text)))
        return self._message.model_copy(
            update={
                "content": content,
                "status": self._status,
                "error": self._error,
                "usage": self._usage,
                "finish_reason": self._finish,
                "provider_state": list(self._states) or None,
                "moderated": self._moderated,
            }
        )


WITHHELD = "withheld"
UNJUDGED = ModerationUnavailable.code
WITHHELD_IN_DOCUMENT = "(Spark AI Agent withheld this reply.)"
"""What a withheld reply's message holds in place of what had streamed (DESIGN §16)."""
UNJUDGED_IN_DOCUMENT = "(Spark AI Agent could not check this reply, so it is not kept.)"
"""What a reply holds in place of what had streamed when its moderation failed closed."""

CUT_NOTE = (
    "\n\n(Spark AI Agent cut this reply short: the conversation is full. "
    "Please start a new conversation to carry on.)"
)


def shrink(message: Message, keep: int) -> Message:
    """``message`` cut to fit a full document: each text part keeps its first ``keep``
    characters and each tool output becomes a short note, then ``CUT_NOTE`` ends it
    (what the user reads and the model sees next time)."""
    content: list[ContentPart] = []
    for part in message.content:
        if part.type == "text" and part.text:
            if keep:
                content.append(ContentPart.of_text(part.text[:keep]))
        elif part.tool_result is not None and len(part.tool_result.output_json) > 200:
            cut = part.tool_result.model_copy(
                update={"output_json": json.dumps({"truncated": True, "note": "Cut to fit."})}
            )
            content.append(part.model_copy(update={"tool_result": cut}))
        else:
            content.append(part)
    content.append(ContentPart.of_text(CUT_NOTE))
    return message.model_copy(update={"content": content})
