"""The events a run emits (DESIGN §4); ``sse.py`` is their one serialiser and
``transcript.py`` their one reducer.

Field names are snake_case here and camelCase on the wire. A field whose metadata says
``wire=False`` is kept for the reducer (the message must hold it) but never sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from shared.schemas.documents import Execution, FinishReason, StepState

_INTERNAL: dict[str, Any] = {"wire": False}


@dataclass(frozen=True, slots=True)
class RunStartEvent:
    """The run started: the ids a client follows it by (the run's, its conversation's,
    the user's message it answers, if any, and the reply's)."""

    run_id: str
    conversation_id: str
    user_message_id: str | None
    assistant_message_id: str
    type: Literal["run_start"] = "run_start"


@dataclass(frozen=True, slots=True)
class TranscriptEvent:
    """A voice message's transcript, before its run starts: each piece as it is heard,
    then (``final``) the whole of it, which is the user message's text."""

    content: str
    final: bool = False
    type: Literal["transcript"] = "transcript"


@dataclass(frozen=True, slots=True)
class TextEvent:
    """A delta of the assistant's text, in order."""

    content: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ToolStartEvent:
    """A tool call started (inline); ``display_text`` is what users see meanwhile."""

    id: str
    tool: str
    args: dict[str, Any]
    display_text: str
    args_json: str = field(default="{}", metadata=_INTERNAL)
    execution: Execution = field(default="inline", metadata=_INTERNAL)
    type: Literal["tool_start"] = "tool_start"


@dataclass(frozen=True, slots=True)
class ToolEndEvent:
    """An inline tool ended; ``error`` says why when ``status`` is ``error``;
    ``document_id`` and ``version`` name the lesson it changed, if it did."""

    id: str
    status: Literal["success", "error"]
    error: str | None = None
    document_id: str | None = None
    version: int | None = None
    output_json: str = field(default="null", metadata=_INTERNAL)
    # The call's stored status when it is not the plain one (a task never started).
    call_status: Literal["cancelled"] | None = field(default=None, metadata=_INTERNAL)
    # What the result shows, in words: its part's ``description`` (stored, not sent, and
    # no part of the event's identity: a replay derives one where the live run had none).
    description: str | None = field(default=None, metadata=_INTERNAL, compare=False)
    type: Literal["tool_end"] = "tool_end"


@dataclass(frozen=True, slots=True)
class TaskQueuedEvent:
    """A task tool was handed to Cloud Tasks; its result arrives through Firestore."""

    task_id: str
    tool_call_id: str
    tool: str
    display_text: str
    args_json: str = field(default="{}", metadata=_INTERNAL)
    type: Literal["task_queued"] = "task_queued"


@dataclass(frozen=True, slots=True)
class QuestionEvent:
    """The model asks the user (``ask_user_question``); the run waits for the answers."""

    tool_call_id: str
    questions: list[dict[str, Any]]
    tool: str = field(default="ask_user_question", metadata=_INTERNAL)
    args_json: str = field(default="{}", metadata=_INTERNAL)
    display_text: str = field(default="Asking you a question", metadata=_INTERNAL)
    type: Literal["question"] = "question"


@dataclass(frozen=True, slots=True)
class ApprovalRequiredEvent:
    """A tool that needs the owner's approval was called; the run waits for it."""

    tool_call_id: str
    tool: str
    args: dict[str, Any]
    display_text: str
    args_json: str = field(default="{}", metadata=_INTERNAL)
    execution: Execution = field(default="inline", metadata=_INTERNAL)
    type: Literal["approval_required"] = "approval_required"


@dataclass(frozen=True, slots=True)
class UsageEvent:
    """One model step ended: its token usage, why it stopped, and what the provider
    asked to have back with it next time (never sent)."""

    input_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    state: StepState | None = None
    # The part of ``input_tokens`` the provider read from its prompt cache.
    cached_input_tokens: int = 0
    type: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True)
class ModeratedEvent:
    """The moderator stopped the run's turn (``input``) or its reply (``output``): the
    message records it, never the words (never sent: the user sees only the reply)."""

    direction: Literal["input", "output"]
    category: str
    type: Literal["moderated"] = "moderated"


DoneStatus = Literal["complete", "waiting", "queued", "stopped"]


@dataclass(frozen=True, slots=True)
class DoneEvent:
    """The run ended normally (or was stopped by its owner); nothing follows."""

    message_id: str
    status: DoneStatus
    type: Literal["done"] = "done"


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """The run failed; ``message`` is for the user. Nothing follows."""

    message: str
    code: str
    type: Literal["error"] = "error"


AgentEvent = (
    TranscriptEvent
    | RunStartEvent
    | TextEvent
    | ToolStartEvent
    | ToolEndEvent
    | TaskQueuedEvent
    | QuestionEvent
    | ApprovalRequiredEvent
    | UsageEvent
    | ModeratedEvent
    | DoneEvent
    | ErrorEvent
)

TERMINAL = (DoneEvent, ErrorEvent)
UNSENT = (UsageEvent, ModeratedEvent)
"""Events the reducer folds but clients never see."""
