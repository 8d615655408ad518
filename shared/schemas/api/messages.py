"""The bodies of a conversation's routes: sending a message, answering the agent's
questions and approvals, a client tool's result, resuming, stopping and cancelling."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from shared.schemas.api.common import (
    MAX_CLIENT_OUTPUT_BYTES,
    MAX_TEXT_BYTES,
    ConversationId,
    DocumentId,
    Inbound,
    Label,
    ToolCallId,
    UserId,
    VoiceSessionId,
)


class AttachmentRef(Inbound):
    """A file the sender uploaded to Cloud Storage, referenced by a message."""

    storage_path: str = Field(
        alias="storagePath",
        min_length=1,
        max_length=1024,
        description="Where the file was uploaded: under `{uid}/uploads/`.",
    )
    content_type: str = Field(
        alias="contentType",
        min_length=1,
        max_length=100,
        description="The type the client believes it is: image/jpeg, image/png or "
        "application/pdf. The server checks the file's bytes.",
    )
    size_bytes: StrictInt = Field(alias="sizeBytes", ge=0, description="The file's size in bytes.")


class VoiceRef(Inbound):
    """A push-to-talk clip the sender uploaded: the server transcribes it."""

    storage_path: str = Field(
        alias="storagePath",
        min_length=1,
        max_length=1024,
        description="Where the clip was uploaded, under `{uid}/uploads/`: WebM or Ogg "
        "(Opus), MP3, M4A or WAV, at most 25 MB and `SPARK_VOICE_MAX_SECONDS` long "
        "(judged from its bytes).",
    )


class SendMessageRequest(Inbound):
    """``POST /api/spark/agent/messages``: ``text``, ``voice`` or both."""

    conversation_id: ConversationId | None = Field(default=None, alias="conversationId")
    text: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT_BYTES,
        pattern=r"\S",
        description="What the sender typed; optional with `voice` (then it follows the "
        "transcript).",
    )
    voice: VoiceRef | None = Field(
        default=None,
        description="A voice clip to transcribe before the reply starts: its transcript "
        "becomes the message's text (with SSE, `transcript` events come first).",
    )
    document_id: DocumentId | None = Field(
        default=None,
        alias="documentId",
        description="The lesson open in the sender's editor; the agent's document tools "
        "work on it from this message on.",
    )
    attachments: list[AttachmentRef] = Field(
        default_factory=list,
        max_length=10,
        description="Images (JPEG, PNG) and PDFs uploaded under `{uid}/uploads/`, "
        "at most 10, each at most 25 MB.",
    )
    when_busy: Literal["reject", "queue"] = Field(
        default="reject",
        alias="whenBusy",
        description="While a reply is being written: refuse (409) or queue this message. "
        "Ignored by a message to family members (a delivery never waits).",
    )
    target_user_id: UserId | None = Field(
        default=None,
        alias="targetUserId",
        description="Send the text verbatim to this member of the sender's family (no "
        "model call), into the pair's `direct` conversation: 201 `{conversationId, "
        "messageId, recipients}`.",
    )
    target_family: StrictBool = Field(
        default=False,
        alias="targetFamily",
        description="Send the text verbatim to every member of the sender's family, "
        "into the family's `family` conversation (201, as `targetUserId`).",
    )

    input: Literal["text", "voice"] = Field(
        default="text",
        description="`voice`: the text is the transcript of an utterance spoken in a "
        "live-audio session (`voiceSessionId`); the message is stored with `input: voice`.",
    )
    voice_session_id: VoiceSessionId | None = Field(
        default=None,
        alias="voiceSessionId",
        description="The live-audio session the utterance was spoken in (`input: voice` "
        "only). The first voice message redeems it for its conversation: it cannot carry "
        "messages into another (409 voice_session_used), nor after it ends (410).",
    )

    @model_validator(mode="after")
    def _one_target(self) -> SendMessageRequest:
        if self.target_user_id is not None and self.target_family:
            raise ValueError("send either targetUserId or targetFamily, not both")
        verbatim = self.target_user_id is not None or self.target_family
        if verbatim and self.conversation_id is not None:
            raise ValueError(
                "a message with targetUserId or targetFamily names no conversationId "
                "(its conversation follows from the target)"
            )
        if verbatim and self.document_id is not None:
            raise ValueError("a message to family members carries no documentId")
        if verbatim and (self.voice is not None or not self.text):
            raise ValueError("a message to family members is its text (no voice clip)")
        return self

    @model_validator(mode="after")
    def _voice_names_its_session(self) -> SendMessageRequest:
        if self.input == "voice" and self.voice_session_id is None:
            raise ValueError('a message with input "voice" names its voiceSessionId')
        if self.input != "voice" and self.voice_session_id is not None:
            raise ValueError('voiceSessionId goes only with input "voice"')
        return self

    @field_validator("text")
    @classmethod
    def _bounded_and_not_blank(cls, text: str | None) -> str | None:
        if text is None:
            return None
        if not text.strip():
            raise ValueError("text must not be blank")
        if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
            raise ValueError(
                f"text must be at most {MAX_TEXT_BYTES // 1024} KiB "
                f"({MAX_TEXT_BYTES:,} bytes of UTF-8)"
            )
        return text

    @model_validator(mode="after")
    def _text_or_voice(self) -> SendMessageRequest:
        if self.text is None and self.voice is None:
            # Located at ``text``, as a missing field is: the client's fix is there.
            said = PydanticCustomError("value_error", "text (or voice) is required")
            problem = InitErrorDetails(type=said, loc=("text",), input=None)
            raise ValidationError.from_exception_data(type(self).__name__, [problem])
        return self


class DeliveredResponse(BaseModel):
    """``201``: a message delivered verbatim to family members (no model call). A retry
    with the same `Idempotency-Key` gets the first answer again, and nothing is
    delivered twice."""

    model_config = ConfigDict(populate_by_name=True)

    conversation_id: str = Field(
        alias="conversationId",
        description="The shared conversation (`direct` or `family`): the same id in "
        "every member's copy.",
    )
    message_id: str = Field(alias="messageId", description="The same in every copy.")
    recipients: list[str] = Field(
        description="The user ids of the members who received it (the sender excluded)."
    )


class AnswersRequest(Inbound):
    """``POST .../conversations/{id}/answers``: question index → label(s)."""

    tool_call_id: ToolCallId = Field(alias="toolCallId")
    answers: dict[Annotated[str, StringConstraints(pattern=r"^[0-9]$")], Label | list[Label]] = (
        Field(min_length=1, max_length=4)
    )


class ApprovalRequest(Inbound):
    """``POST .../conversations/{id}/approvals``: the owner's decision on a call."""

    tool_call_id: ToolCallId = Field(alias="toolCallId")
    approved: StrictBool
    reason: str | None = Field(default=None, max_length=500)


class ToolResultRequest(Inbound):
    """``POST .../conversations/{id}/tool-results``: what a client-executed tool gave."""

    tool_call_id: ToolCallId = Field(alias="toolCallId")
    output: Any
    status: Literal["ok", "error"]

    @field_validator("output")
    @classmethod
    def _bounded(cls, output: Any) -> Any:
        size = len(json.dumps(output, ensure_ascii=False).encode())
        if size > MAX_CLIENT_OUTPUT_BYTES:
            raise ValueError(
                f"output must be at most {MAX_CLIENT_OUTPUT_BYTES // 1024} KiB "
                f"({MAX_CLIENT_OUTPUT_BYTES:,} bytes) as JSON"
            )
        return output


class ResumeResponse(BaseModel):
    """A person's result was taken: ``accepted`` (the agent goes on; without a stream a
    task writes its reply) or ``recorded`` (other calls of the step still wait)."""

    model_config = ConfigDict(populate_by_name=True)

    conversation_id: str = Field(alias="conversationId")
    status: Literal["accepted", "recorded"]


class AckResponse(BaseModel):
    """202 answer when the client did not ask for a stream, or the message was queued
    behind a live run (``status: "queued"``)."""

    model_config = ConfigDict(populate_by_name=True)

    conversation_id: str = Field(alias="conversationId")
    message_id: str = Field(alias="messageId")
    status: Literal["accepted", "queued"] = "accepted"


class StopResponse(BaseModel):
    """``POST .../stop``: ``stopping`` until its producer notices (about a second)."""

    model_config = ConfigDict(populate_by_name=True)

    conversation_id: str = Field(alias="conversationId")
    run_id: str | None = Field(alias="runId")
    status: Literal["stopping", "stopped"]


class CancelTaskResponse(BaseModel):
    """``POST .../tasks/{taskId}/cancel``: ``cancelled`` at once (``200``: it had not
    started, or waited for an answer), or ``cancelling`` (``202``): its tool is running
    and stops at its next step."""

    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")
    conversation_id: str = Field(alias="conversationId")
    status: Literal["cancelled", "cancelling"]
