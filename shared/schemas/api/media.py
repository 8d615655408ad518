"""The bodies of uploads and voice: an upload session, a live-audio session, a reply
read aloud."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
)

from shared.attachment_rules import MAX_BYTES, MAX_NAME_CHARS, UPLOADABLE
from shared.schemas.api.common import Inbound


class UploadRequest(Inbound):
    """``POST /api/spark/agent/uploads``: the file a client is about to upload.

    The api checks the limits stated here itself, so that each is answered with its own
    status (415 for the type, 413 for the size, 400 for the rest) and a message naming it.
    """

    file_name: StrictStr = Field(
        alias="fileName",
        description="The file's name on the client's device; the server keeps a safe "
        "form of it (ASCII letters, digits, '.', '-', '_'; at most 100 characters) in "
        "the path.",
        json_schema_extra={"minLength": 1, "maxLength": MAX_NAME_CHARS},
    )
    content_type: StrictStr = Field(
        alias="contentType",
        max_length=100,
        description="The file's type. The server checks the bytes again when a message "
        "attaches the file (or sends it as `voice`). Audio may also be named with "
        "parameters (`audio/webm;codecs=opus`) or a common other name (`audio/x-wav`).",
        json_schema_extra={"enum": list(UPLOADABLE)},
    )
    size_bytes: StrictInt = Field(
        alias="sizeBytes",
        description="The file's exact size in bytes: the upload must be exactly this long.",
        json_schema_extra={"minimum": 1, "maximum": MAX_BYTES},
    )


class UploadResponse(BaseModel):
    """``201``: where the file goes, and how to send it there."""

    model_config = ConfigDict(populate_by_name=True)

    storage_path: str = Field(
        alias="storagePath",
        description="Where the file will be, under `{uid}/uploads/`: a message's "
        "attachment names it.",
    )
    upload_url: str = Field(
        alias="uploadUrl",
        description="A Cloud Storage resumable upload session: send the file's bytes "
        "here, with no Authorization header (the URL is the permission).",
    )
    method: Literal["PUT"]
    headers: dict[str, str] = Field(description="The headers to send with the upload.")
    expires_at: datetime = Field(
        alias="expiresAt",
        description="When Cloud Storage forgets the session (a week after it started); "
        "ask for a new one after that.",
    )


class VoiceSessionResponse(BaseModel):
    """``201``: a live-audio session. The browser opens its connection to ``provider``
    with ``secret`` before ``expiresAt``; nobody is shown the secret again."""

    model_config = ConfigDict(populate_by_name=True)

    session_id: str = Field(
        alias="sessionId",
        description="Send each finished utterance's transcript as a message with "
        '`input: "voice"` and this `voiceSessionId`.',
    )
    secret: str = Field(
        description="The provider's short-lived, single-use secret: an OpenAI Realtime "
        "client secret (`ek_…`) or a Gemini Live ephemeral token (`auth_tokens/…`)."
    )
    expires_at: datetime = Field(
        alias="expiresAt", description="The connection must be opened before this."
    )
    ends_at: datetime = Field(
        alias="endsAt", description="After this, the session's messages are refused (410)."
    )
    provider: Literal["openai", "google"]
    model: str = Field(description="The live model the secret is for.")


class SpeechRequest(Inbound):
    """``POST .../conversations/{id}/speech``: which reply to read aloud."""

    message_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,128}$")] = Field(
        alias="messageId", description="A finished reply of Spark AI Agent's in this conversation."
    )
