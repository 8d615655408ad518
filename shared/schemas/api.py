"""HTTP request and response bodies of the ``api`` function (DESIGN §4)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from shared.attachment_rules import MAX_BYTES, MAX_NAME_CHARS, UPLOADABLE
from shared.schemas.documents import FamilyRole
from shared.schemas.server import Family, Invite, InviteStatus

MAX_TEXT_BYTES = 32 * 1024
MAX_CLIENT_OUTPUT_BYTES = 64 * 1024

ToolCallId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,128}$")]
Label = Annotated[str, StringConstraints(min_length=1, max_length=80)]

CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# An SSE event id (``shared/agent/transcript.py``): {runId}:{parts}:{chars} or {runId}:end.
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


class RestoreRequest(Inbound):
    """``POST /api/spark/lessons/{lessonId}/restore``: the kept version to bring back."""

    version: StrictInt = Field(ge=1, le=2**31, description="A kept version (see .../versions).")


class KeptVersionInfo(BaseModel):
    """One kept version of a lesson."""

    model_config = ConfigDict(populate_by_name=True)

    version: int
    title: str
    saved_at: datetime = Field(alias="savedAt", description="When this version was saved.")
    characters: int = Field(description="The length of its body.")


class LessonVersionsResponse(BaseModel):
    """``GET /api/spark/lessons/{lessonId}/versions``: the kept versions, newest first;
    ``currentVersion`` is ``null`` for a deleted lesson (a restore brings it back)."""

    model_config = ConfigDict(populate_by_name=True)

    lesson_id: str = Field(alias="lessonId")
    current_version: int | None = Field(alias="currentVersion")
    versions: list[KeptVersionInfo]


class RestoreResponse(BaseModel):
    """The restored content is the lesson's new version (the one it replaced is kept)."""

    model_config = ConfigDict(populate_by_name=True)

    lesson_id: str = Field(alias="lessonId")
    version: int = Field(description="The lesson's version now.")
    restored_from: int = Field(alias="restoredFrom")


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


class Problem(BaseModel):
    """One problem of a body that did not validate, as the validator put it."""

    field: str = Field(description="The field, as sent: `attachments[0].storagePath`.")
    type: str = Field(description="The validator's name for the problem (pydantic's).")
    detail: str = Field(description="The validator's own words.")


class ErrorDetail(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    code: str
    message: str = Field(description="What went wrong and what to do, in plain words.")
    request_id: str | None = Field(default=None, alias="requestId")
    details: list[Problem] | None = Field(
        default=None,
        description="A body that did not validate (400): each problem, beside the message "
        "that puts them all in plain words.",
    )


class ErrorBody(BaseModel):
    """Every JSON error: ``{"error": {"code", "message", "requestId", "details"?}}``."""

    error: ErrorDetail


# -- families (DESIGN §8) ------------------------------------------------------------------

FAMILY_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


def _visible(value: str | None) -> str | None:
    """A name must show something: not blank, no control characters."""
    if value is None:
        return None
    if not value.strip():
        raise ValueError("must not be blank")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise ValueError("must not contain control characters")
    return value


class CreateFamilyRequest(Inbound):
    """``POST /api/spark/families``: a new family, with the caller as its parent."""

    name: StrictStr = Field(min_length=1, max_length=80, description="The family's name.")
    display_name: StrictStr | None = Field(
        default=None,
        alias="displayName",
        min_length=1,
        max_length=80,
        description="The name the other members will see; by default the sign-in "
        "token's name, else the part of its e-mail address before the @.",
    )

    _names = field_validator("name", "display_name")(_visible)


class InviteRequest(Inbound):
    """``POST /api/spark/families/{familyId}/invites`` (parents only)."""

    role: FamilyRole = Field(description="The role whoever joins with this link will have.")
    max_uses: StrictInt = Field(
        default=1, alias="maxUses", ge=1, le=10, description="How many people may join with it."
    )
    expires_in_hours: StrictInt = Field(
        default=72, alias="expiresInHours", ge=1, le=168, description="How long it works."
    )


class JoinRequest(Inbound):
    """``POST /api/spark/families/join``: join with an invite link's token."""

    token: StrictStr = Field(
        min_length=1, max_length=256, description="The `token` of the invite link."
    )
    display_name: StrictStr | None = Field(
        default=None,
        alias="displayName",
        min_length=1,
        max_length=80,
        description="The name the other members will see (as in CreateFamilyRequest).",
    )

    _names = field_validator("display_name")(_visible)


class RoleRequest(Inbound):
    """``PATCH /api/spark/families/{familyId}/members/{userId}`` (parents only)."""

    role: FamilyRole


class MemberInfo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    user_id: str = Field(alias="userId")
    display_name: str = Field(alias="displayName")
    role: FamilyRole
    joined_at: datetime = Field(alias="joinedAt")


class FamilyInfo(BaseModel):
    """A family as its members see it."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    name: str
    members: list[MemberInfo] = Field(description="In the order they joined.")
    created_at: datetime = Field(alias="createdAt")

    @classmethod
    def of(cls, family: Family) -> FamilyInfo:
        members = [MemberInfo.model_validate(m.model_dump()) for m in family.members]
        return cls(id=family.id, name=family.name, members=members, created_at=family.created_at)


class FamilyResponse(BaseModel):
    """``{family}``: the family after the change."""

    family: FamilyInfo


class InviteInfo(BaseModel):
    """An invite, without its token (the token is shown once, when it is made)."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    role: FamilyRole
    max_uses: int = Field(alias="maxUses")
    uses: int
    expires_at: datetime = Field(alias="expiresAt")
    created_at: datetime = Field(alias="createdAt")
    created_by: str = Field(alias="createdBy")
    status: InviteStatus = Field(
        description="Whether it still lets anyone join, and if not, why not."
    )

    @classmethod
    def of(cls, invite: Invite, status: InviteStatus) -> InviteInfo:
        return cls.model_validate({**invite.model_dump(), "status": status})


class InviteResponse(BaseModel):
    """``201``: the new invite, its token and link. They are shown only this once: only
    the token's SHA-256 is kept."""

    invite: InviteInfo
    token: str = Field(description="At least 128 random bits, URL-safe.")
    link: str = Field(description="`SPARK_APP_URL` + `/join?token=` + the token.")


class InvitesResponse(BaseModel):
    """``GET /api/spark/families/{familyId}/invites``: the family's invites, newest first."""

    invites: list[InviteInfo]


class LessonProgressInfo(BaseModel):
    """One lesson of a member, as their family sees its progress."""

    model_config = ConfigDict(populate_by_name=True)

    lesson_id: str = Field(alias="lessonId")
    title: str
    updated_at: datetime = Field(alias="updatedAt")
    blanks: int = Field(description="Its fill-in blanks (`<blank>`).")
    answered: int = Field(description="Blanks whose `student-answer` is not empty.")


class MemberProgressInfo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    user_id: str = Field(alias="userId")
    display_name: str = Field(alias="displayName")
    role: FamilyRole
    lessons: list[LessonProgressInfo] = Field(
        description="Their 50 most recently updated lessons, newest first."
    )


class ProgressResponse(BaseModel):
    """``GET /api/spark/families/{familyId}/progress`` (members only): each member's
    lessons, counted on the server."""

    model_config = ConfigDict(populate_by_name=True)

    family_id: str = Field(alias="familyId")
    members: list[MemberProgressInfo] = Field(description="In the order they joined.")


class SettingsRequest(Inbound):
    """``PATCH /api/spark/me/settings``: change the caller's settings (the fields given)."""

    ai_reads_family_messages: StrictBool = Field(
        alias="aiReadsFamilyMessages",
        description="false: no family message the caller wrote is given to any model "
        "(theirs or another member's), and their own agent reads no family messages. It "
        "holds from the next model call on, also for runs already queued or waiting.",
    )


class SettingsInfo(BaseModel):
    """The caller's settings, as their mirror (`/{uid}/client/settings/current`) holds them."""

    model_config = ConfigDict(populate_by_name=True)

    ai_reads_family_messages: bool = Field(alias="aiReadsFamilyMessages")
    updated_at: datetime | None = Field(default=None, alias="updatedAt")


class ModelResponse(BaseModel):
    """``{model, demo, examples}``: which model answers. ``demo`` is true when no
    provider is configured and the demo model answers (``docs/demo.md``); ``examples``
    are then the requests it recognises, as a person would type them (empty otherwise)."""

    model: str = Field(description="The model's label, as each reply records it.")
    demo: bool = Field(description="Whether the offline demo model answers.")
    examples: list[str] = Field(
        default_factory=list, description="Requests the demo model recognises; empty otherwise."
    )


class SettingsResponse(BaseModel):
    """``{settings}``: the caller's settings after the change."""

    settings: SettingsInfo
