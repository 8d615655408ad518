"""The Firestore documents web clients read (DESIGN §3).

Field names are camelCase in Firestore and snake_case in Python. Documents are
written only by our functions; ``extra="allow"`` keeps fields written by a newer
version intact when an older instance rewrites the messages array.

One module a document: ``conversation`` (with its ``parts``), ``tasks``, ``lessons`` and
``family`` (with the user's settings), on ``base``. Every document is imported from here.
"""

from __future__ import annotations

from shared.schemas.documents.base import (
    ConversationKind,
    Document,
    Execution,
    FamilyRole,
    FinishReason,
    MessageStatus,
    ModelFinishReason,
    PartType,
    Role,
    RunStatus,
    TaskStatus,
    Timestamp,
    ToolCallStatus,
    Via,
)
from shared.schemas.documents.conversation import (
    MAX_AUTO_TITLE,
    MAX_COMMENT,
    MAX_STATE_CHARS,
    MAX_TITLE,
    ActiveRun,
    ArchiveClaim,
    ArchiveMarker,
    ArchiveSegment,
    Author,
    Conversation,
    Feedback,
    Message,
    MessageError,
    Moderated,
    Rating,
    StepState,
    TitleSource,
    Usage,
)
from shared.schemas.documents.family import (
    MAX_FLAGS,
    Consent,
    Controls,
    FamilyMember,
    FamilyMirror,
    QuietHours,
    SafetyFlag,
    SafetyMirror,
    UserSettings,
)
from shared.schemas.documents.lessons import (
    Lesson,
    LessonVersion,
)
from shared.schemas.documents.parts import (
    MAX_DESCRIPTION_CHARS,
    ContentPart,
    FileRef,
    ToolCall,
    ToolResult,
    describe,
    short,
)
from shared.schemas.documents.tasks import (
    KeyOutput,
    TaskDocument,
    TaskState,
    TaskUpdate,
)

__all__ = [
    "MAX_AUTO_TITLE",
    "MAX_COMMENT",
    "MAX_DESCRIPTION_CHARS",
    "MAX_FLAGS",
    "MAX_STATE_CHARS",
    "MAX_TITLE",
    "ActiveRun",
    "ArchiveClaim",
    "ArchiveMarker",
    "ArchiveSegment",
    "Author",
    "Consent",
    "ContentPart",
    "Controls",
    "Conversation",
    "ConversationKind",
    "Document",
    "Execution",
    "FamilyMember",
    "FamilyMirror",
    "FamilyRole",
    "Feedback",
    "FileRef",
    "FinishReason",
    "KeyOutput",
    "Lesson",
    "LessonVersion",
    "Message",
    "MessageError",
    "MessageStatus",
    "ModelFinishReason",
    "Moderated",
    "PartType",
    "QuietHours",
    "Rating",
    "Role",
    "RunStatus",
    "SafetyFlag",
    "SafetyMirror",
    "StepState",
    "TaskDocument",
    "TaskState",
    "TaskStatus",
    "TaskUpdate",
    "Timestamp",
    "TitleSource",
    "ToolCall",
    "ToolCallStatus",
    "ToolResult",
    "Usage",
    "UserSettings",
    "Via",
    "describe",
    "short",
]
