"""What every body of the ``api`` function shares: the bounds of a message, the patterns of
its ids, and ``Inbound``, the base of request bodies."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    StringConstraints,
)

MAX_TEXT_BYTES = 32 * 1024


MAX_CLIENT_OUTPUT_BYTES = 64 * 1024


ToolCallId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,128}$")]


Label = Annotated[str, StringConstraints(min_length=1, max_length=80)]


CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


# An SSE event id (``shared/agent/stream/transcript.py``): {runId}:{parts}:{chars} or {runId}:end.
EVENT_ID_PATTERN = r"^([A-Za-z0-9_-]{1,128}):(?:([0-9]{1,9}):([0-9]{1,12})|end)$"


ConversationId = Annotated[str, StringConstraints(pattern=CONVERSATION_ID_PATTERN)]


# A user id: no "/" (a member's id is only ever compared with the family's members, so
# one the token verifier would refuse finds nobody: 404, never a path).
UserId = Annotated[str, StringConstraints(pattern=r"^[^/]{1,128}$")]


LESSON_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"


DocumentId = Annotated[str, StringConstraints(pattern=LESSON_ID_PATTERN)]


VoiceSessionId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class Inbound(BaseModel):
    """Base of request bodies: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)
