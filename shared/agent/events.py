"""The events a run emits (DESIGN §4); ``sse.py`` is their one serialiser.

Field names are snake_case here and camelCase on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class RunStartEvent:
    run_id: str
    conversation_id: str
    user_message_id: str | None
    assistant_message_id: str
    type: Literal["run_start"] = "run_start"


@dataclass(frozen=True, slots=True)
class TextEvent:
    """A delta of the assistant's text, in order."""

    content: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ToolStartEvent:
    """An inline tool started; ``display_text`` is what users see meanwhile."""

    id: str
    tool: str
    args: dict[str, Any]
    display_text: str
    type: Literal["tool_start"] = "tool_start"


@dataclass(frozen=True, slots=True)
class ToolEndEvent:
    """An inline tool ended; ``error`` says why when ``status`` is ``error``."""

    id: str
    status: Literal["success", "error"]
    error: str | None = None
    document_id: str | None = None
    type: Literal["tool_end"] = "tool_end"


@dataclass(frozen=True, slots=True)
class TaskQueuedEvent:
    """A task tool was handed to Cloud Tasks; its result arrives through Firestore."""

    task_id: str
    tool_call_id: str
    tool: str
    display_text: str
    type: Literal["task_queued"] = "task_queued"


@dataclass(frozen=True, slots=True)
class DoneEvent:
    """The run ended normally; nothing follows."""

    message_id: str
    status: Literal["complete", "waiting", "queued"]
    type: Literal["done"] = "done"


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """The run failed; ``message`` is for the user. Nothing follows."""

    message: str
    code: str
    type: Literal["error"] = "error"


AgentEvent = (
    RunStartEvent
    | TextEvent
    | ToolStartEvent
    | ToolEndEvent
    | TaskQueuedEvent
    | DoneEvent
    | ErrorEvent
)

TERMINAL = (DoneEvent, ErrorEvent)
