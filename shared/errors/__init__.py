"""The one exception tree of Spark AI Agent.

Every error we raise on purpose is a ``SparkError``; each class knows the HTTP status
and the stable ``code`` the API returns, so the HTTP edge maps errors in one place::

    SparkError                      500 internal
    ├── RequestError                400 invalid_request       (the caller can fix it)
    │   ├── InvalidBody             400 invalid_request       (each field's problem in details)
    │   ├── Unauthenticated         401 unauthenticated
    │   │   ├── TokenExpired        401 token_expired
    │   │   └── TokenRevoked        401 token_revoked
    │   ├── Forbidden               403 forbidden             (authenticated, not allowed)
    │   │   ├── ParentOnly          403 parent_only           (a family's parents only)
    │   │   └── ParentControls      403 parent_controls       (its reason: which control)
    │   ├── NotFound                404 not_found
    │   │   ├── NoFamily            404 no_family             (the caller is in no family)
    │   │   ├── FamilyNotFound      404 family_not_found      (not the caller's: never 403)
    │   │   ├── MemberNotFound      404 member_not_found      (not in the caller's family)
    │   │   ├── InviteNotFound      404 invite_not_found      (unknown or forged token)
    │   │   └── VoiceSessionNotFound 404 voice_session_not_found (not the caller's)
    │   ├── MethodNotAllowed        405 method_not_allowed
    │   ├── NotAcceptable           406 not_acceptable
    │   ├── RunInProgress           409 run_in_progress
    │   ├── NoActiveRun             409 no_active_run         (nothing to stop)
    │   ├── TaskFinished            409 task_finished         (nothing left to cancel)
    │   ├── AlreadyAnswered         409 already_answered      (that result exists already)
    │   ├── VersionConflict         409 version_conflict      (the document changed meanwhile)
    │   ├── AlreadyInFamily         409 already_in_family     (one family per user)
    │   ├── FamilyFull              409 family_full           (SPARK_FAMILY_MAX_MEMBERS)
    │   ├── LastParent              409 last_parent           (a family keeps a parent)
    │   ├── TooManyInvites          409 too_many_invites      (open links per family)
    │   ├── VoiceUnavailable        409 voice_unavailable     (no audio or transcription provider)
    │   ├── VoiceSessionUsed        409 voice_session_used    (redeemed in another conversation)
    │   ├── VoiceSessionEnded       410 voice_session_ended
    │   ├── AccountDeleted          410 account_deleted       (the caller's erasure has begun)
    │   ├── InviteGone              410 invite_gone           (the link worked once)
    │   │   ├── InviteExpired       410 invite_expired
    │   │   ├── InviteUsedUp        410 invite_used_up
    │   │   └── InviteRevoked       410 invite_revoked
    │   ├── RateLimited             429 rate_limited          (a per-user limit; Retry-After)
    │   │   └── SlotsTaken          429 rate_limited          (all run slots taken: runs wait)
    │   ├── PayloadTooLarge         413 payload_too_large
    │   ├── UnsupportedMediaType    415 unsupported_media_type
    │   └── UnprocessableContent    422 unprocessable_content (e.g. an encrypted PDF)
    │       └── NoSpeech            422 no_speech             (a voice clip with no words)
    ├── ProviderError               502 provider_error        (the model provider failed)
    │   ├── ProviderUnavailable     503 provider_unavailable  (network, 5xx, timeouts)
    │   ├── ProviderRateLimited     503 provider_rate_limited
    │   ├── ProviderSilent          504 provider_timeout      (sent nothing for too long)
    │   ├── ModerationUnavailable   503 moderation_unavailable (the moderator failed: closed)
    │   ├── ProviderRejected        502 provider_rejected     (auth, bad request, ...)
    │   ├── IncompleteResponse      502 incomplete_response   (stream ended early)
    │   └── ContentFiltered         502 content_filtered      (the provider's filter stopped it)
    ├── TaskCancelled               --  a task tool learns its user cancelled it (never an answer)
    ├── ConversationTouched         --  a retention delete finds it changed since (never an answer)
    ├── ReplyWithheld               --  a run's reply was flagged: it ends as withheld
    ├── TurnModerated               --  a run learns its user's turn was flagged (never an answer)
    ├── RunEnded                    --  a run learns it must stop writing (never an answer)
    │   ├── RunInterrupted          503 run_interrupted       (closed as dead, or taken over)
    │   └── RunStopped              409 run_stopped           (its owner asked it to stop)
    ├── AuthUnavailable             503 auth_unavailable      (token keys unreachable)
    ├── Busy                        503 busy                  (bodies at once; Retry-After)
    ├── QueueUnavailable            503 queue_unavailable     (Cloud Tasks failed)
    ├── StoreError                  503 store_unavailable     (Firestore failed)
    │   └── ConversationTooLarge    507 conversation_too_large
    ├── ConfigurationError          500 misconfigured         (refuses to start)
    └── ToolError                   422 tool_error            (never an answer: its message goes
                                                                back to the model, the run goes on)

Adapters translate their SDK's exceptions into this tree; nothing above an adapter
ever sees an ``openai`` or ``google.api_core`` exception, and the SDK's own words stay
in ``detail``, which only the log sees.

The tree lives in ``base`` (its root), ``requests`` (what the caller can fix),
``families``, ``voice`` and ``failures`` (ours or a service's); every error is imported
from here.
"""

from __future__ import annotations

from shared.errors.base import (
    INTERNAL_MESSAGE,
    SparkError,
)
from shared.errors.failures import (
    AuthUnavailable,
    Busy,
    ConfigurationError,
    ContentFiltered,
    ConversationTooLarge,
    ConversationTouched,
    IllegalTransition,
    IncompleteResponse,
    ModerationUnavailable,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderSilent,
    ProviderUnavailable,
    QueueUnavailable,
    ReplyWithheld,
    RunEnded,
    RunInterrupted,
    RunStopped,
    StoreError,
    TaskCancelled,
    ToolError,
    TurnModerated,
)
from shared.errors.families import (
    AlreadyInFamily,
    FamilyFull,
    FamilyNotFound,
    InviteExpired,
    InviteGone,
    InviteNotFound,
    InviteRevoked,
    InviteUsedUp,
    LastParent,
    MemberNotFound,
    NoFamily,
    ParentControls,
    ParentOnly,
    TooManyInvites,
)
from shared.errors.requests import (
    AccountDeleted,
    AlreadyAnswered,
    Forbidden,
    IdempotencyKeyReused,
    InvalidBody,
    MethodNotAllowed,
    NoActiveRun,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RequestError,
    RunInProgress,
    SlotsTaken,
    TaskFinished,
    TokenExpired,
    TokenRevoked,
    Unauthenticated,
    UnprocessableContent,
    UnsupportedMediaType,
    VersionConflict,
)
from shared.errors.voice import (
    NoSpeech,
    VoiceSessionEnded,
    VoiceSessionNotFound,
    VoiceSessionUsed,
    VoiceUnavailable,
)

__all__ = [
    "INTERNAL_MESSAGE",
    "AccountDeleted",
    "AlreadyAnswered",
    "AlreadyInFamily",
    "AuthUnavailable",
    "Busy",
    "ConfigurationError",
    "ContentFiltered",
    "ConversationTooLarge",
    "ConversationTouched",
    "FamilyFull",
    "FamilyNotFound",
    "Forbidden",
    "IdempotencyKeyReused",
    "IllegalTransition",
    "IncompleteResponse",
    "InvalidBody",
    "InviteExpired",
    "InviteGone",
    "InviteNotFound",
    "InviteRevoked",
    "InviteUsedUp",
    "LastParent",
    "MemberNotFound",
    "MethodNotAllowed",
    "ModerationUnavailable",
    "NoActiveRun",
    "NoFamily",
    "NoSpeech",
    "NotAcceptable",
    "NotFound",
    "ParentControls",
    "ParentOnly",
    "PayloadTooLarge",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderRejected",
    "ProviderSilent",
    "ProviderUnavailable",
    "QueueUnavailable",
    "RateLimited",
    "ReplyWithheld",
    "RequestError",
    "RunEnded",
    "RunInProgress",
    "RunInterrupted",
    "RunStopped",
    "SlotsTaken",
    "SparkError",
    "StoreError",
    "TaskCancelled",
    "TaskFinished",
    "TokenExpired",
    "TokenRevoked",
    "TooManyInvites",
    "ToolError",
    "TurnModerated",
    "Unauthenticated",
    "UnprocessableContent",
    "UnsupportedMediaType",
    "VersionConflict",
    "VoiceSessionEnded",
    "VoiceSessionNotFound",
    "VoiceSessionUsed",
    "VoiceUnavailable",
]
