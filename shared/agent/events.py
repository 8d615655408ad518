"""The events a run emits (DESIGN §4); ``sse.py`` is their one serialiser.

Field names are snake_case here and camelCase on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class RunStartEvent:
    run_id: str
    conversation_id: str
    user_message_id: str
    assistant_message_id: str
    type: Literal["run_start"] = "run_start"


@dataclass(frozen=True, slots=True)
class TextEvent:
    """A delta of the assistant's text, in order."""

    content: str
    type: Literal["text"] = "text"


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


AgentEvent = RunStartEvent | TextEvent | DoneEvent | ErrorEvent

TERMINAL = (DoneEvent, ErrorEvent)
