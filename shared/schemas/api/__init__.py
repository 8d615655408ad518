"""HTTP request and response bodies of the ``api`` function (DESIGN §4), one module a
concern: ``common`` (ids and the base of request bodies), ``messages``, ``media``
(uploads and voice), ``lessons``, ``families``, ``settings`` and ``problems`` (errors).

The edge, the OpenAPI export and the tests import every body from here.
"""

from __future__ import annotations

from shared.schemas.api.common import (
    CONVERSATION_ID_PATTERN,
    EVENT_ID_PATTERN,
    LESSON_ID_PATTERN,
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
from shared.schemas.api.families import (
    FAMILY_ID_PATTERN,
    CreateFamilyRequest,
    FamilyInfo,
    FamilyResponse,
    InviteInfo,
    InviteRequest,
    InviteResponse,
    InvitesResponse,
    JoinRequest,
    LessonProgressInfo,
    MemberInfo,
    MemberProgressInfo,
    NameRequest,
    ProgressResponse,
    RoleRequest,
)
from shared.schemas.api.lessons import (
    KeptVersionInfo,
    LessonVersionsResponse,
    RestoreRequest,
    RestoreResponse,
)
from shared.schemas.api.media import (
    SpeechRequest,
    UploadRequest,
    UploadResponse,
    VoiceSessionResponse,
)
from shared.schemas.api.messages import (
    AckResponse,
    AnswersRequest,
    ApprovalRequest,
    AttachmentRef,
    CancelTaskResponse,
    DeliveredResponse,
    ResumeResponse,
    SendMessageRequest,
    StopResponse,
    ToolResultRequest,
    VoiceRef,
)
from shared.schemas.api.problems import (
    ErrorBody,
    ErrorDetail,
    Problem,
)
from shared.schemas.api.settings import (
    ModelResponse,
    SettingsInfo,
    SettingsRequest,
    SettingsResponse,
)

__all__ = [
    "CONVERSATION_ID_PATTERN",
    "EVENT_ID_PATTERN",
    "FAMILY_ID_PATTERN",
    "LESSON_ID_PATTERN",
    "MAX_CLIENT_OUTPUT_BYTES",
    "MAX_TEXT_BYTES",
    "AckResponse",
    "AnswersRequest",
    "ApprovalRequest",
    "AttachmentRef",
    "CancelTaskResponse",
    "ConversationId",
    "CreateFamilyRequest",
    "DeliveredResponse",
    "DocumentId",
    "ErrorBody",
    "ErrorDetail",
    "FamilyInfo",
    "FamilyResponse",
    "Inbound",
    "InviteInfo",
    "InviteRequest",
    "InviteResponse",
    "InvitesResponse",
    "JoinRequest",
    "KeptVersionInfo",
    "Label",
    "LessonProgressInfo",
    "LessonVersionsResponse",
    "MemberInfo",
    "MemberProgressInfo",
    "ModelResponse",
    "NameRequest",
    "Problem",
    "ProgressResponse",
    "RestoreRequest",
    "RestoreResponse",
    "ResumeResponse",
    "RoleRequest",
    "SendMessageRequest",
    "SettingsInfo",
    "SettingsRequest",
    "SettingsResponse",
    "SpeechRequest",
    "StopResponse",
    "ToolCallId",
    "ToolResultRequest",
    "UploadRequest",
    "UploadResponse",
    "UserId",
    "VoiceRef",
    "VoiceSessionId",
    "VoiceSessionResponse",
]
