"""What every stored document shares: ``Document`` (camelCase in Firestore, snake_case in
Python, unknown fields kept), the Firestore ``Timestamp`` and the fixed sets of names."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

Timestamp = Annotated[
    datetime,
    WithJsonSchema(
        {
            "type": "object",
            "title": "Timestamp",
            "description": "A Firestore Timestamp (seconds and nanoseconds since the epoch, UTC).",
            "properties": {"seconds": {"type": "integer"}, "nanoseconds": {"type": "integer"}},
        }
    ),
]


Role = Literal["user", "assistant", "tool", "system"]


MessageStatus = Literal["streaming", "complete", "error", "waiting", "stopped", "withheld"]


PartType = Literal["text", "image", "file", "tool_call", "tool_result"]


Execution = Literal["inline", "task", "client", "question"]


ToolCallStatus = Literal[
    "pending", "awaiting_approval", "queued", "running", "complete", "error", "denied", "cancelled"
]


TaskStatus = Literal["queued", "running", "waiting_on_user", "completed", "failed", "cancelled"]


RunStatus = Literal["queued", "streaming", "stopping"]
"""``queued``: opened, waiting for a Cloud Task to produce it (a ``202`` send or a queued
message). ``streaming``: an instance is producing it. ``stopping``: the owner asked it to
stop; its producer ends it within about a second."""


FamilyRole = Literal["parent", "dependent"]


ConversationKind = Literal["agent", "direct", "family"]
"""``agent``: a user with Spark AI Agent; ``direct``: two family members (a copy in each
one's subtree); ``family``: the whole family (a copy in each member's)."""


Via = Literal["user", "agent"]
"""How a member's message to others was sent: typed by them, or by their agent (with
their approval)."""


ModelFinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
"""Why the model ended a step, as every provider's adapter reports it."""


FinishReason = Literal[ModelFinishReason, "stopped", "error"]
"""Why a message ended: its last step's ``ModelFinishReason``, or ``stopped``/``error``
when the run ended it."""


class Document(BaseModel):
    """Base of everything stored in Firestore."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", validate_assignment=True
    )

    def to_firestore(self) -> dict[str, Any]:
        """The document as Firestore stores it (camelCase, no unset optionals)."""
        return self.model_dump(by_alias=True, exclude_none=True)
