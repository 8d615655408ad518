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
    │   │   └── ParentOnly          403 parent_only           (a family's parents only)
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
    │   ├── VoiceUnavailable        409 voice_unavailable     (offline: no audio provider)
    │   ├── VoiceSessionUsed        409 voice_session_used    (redeemed in another conversation)
    │   ├── VoiceSessionEnded       410 voice_session_ended
    │   ├── InviteGone              410 invite_gone           (the link worked once)
    │   │   ├── InviteExpired       410 invite_expired
    │   │   ├── InviteUsedUp        410 invite_used_up
    │   │   └── InviteRevoked       410 invite_revoked
    │   ├── RateLimited             429 rate_limited          (a per-user limit; Retry-After)
    │   │   └── SlotsTaken          429 rate_limited          (all run slots taken: runs wait)
    │   ├── PayloadTooLarge         413 payload_too_large
    │   ├── UnsupportedMediaType    415 unsupported_media_type
    │   ├── UnprocessableContent    422 unprocessable_content (e.g. an encrypted PDF)
    │   │   └── NoSpeech            422 no_speech             (a voice clip with no words)
    │   └── VoiceUnavailable        422 voice_unavailable     (no transcription provider)
    ├── ProviderError               502 provider_error        (the model provider failed)
    │   ├── ProviderUnavailable     503 provider_unavailable  (network, 5xx, timeouts)
    │   ├── ProviderRateLimited     503 provider_rate_limited
    │   ├── ProviderSilent          504 provider_timeout      (sent nothing for too long)
    │   ├── ProviderRejected        502 provider_rejected     (auth, bad request, ...)
    │   ├── IncompleteResponse      502 incomplete_response   (stream ended early)
    │   └── ContentFiltered         502 content_filtered      (the provider's filter stopped it)
    ├── TaskCancelled               --  a task tool learns its user cancelled it (never an answer)
    ├── RunEnded                    --  a run learns it must stop writing (never an answer)
    │   ├── RunInterrupted          503 run_interrupted       (closed as dead, or taken over)
    │   └── RunStopped              409 run_stopped           (its owner asked it to stop)
    ├── AuthUnavailable             503 auth_unavailable      (token keys unreachable)
    ├── QueueUnavailable            503 queue_unavailable     (Cloud Tasks failed)
    ├── StoreError                  503 store_unavailable     (Firestore failed)
    │   └── ConversationTooLarge    507 conversation_too_large
    ├── ConfigurationError          500 misconfigured         (refuses to start)
    └── ToolError                   422 tool_error            (never an answer: its message goes
                                                                back to the model, the run goes on)

Adapters translate their SDK's exceptions into this tree; nothing above an adapter
ever sees an ``openai`` or ``google.api_core`` exception, and the SDK's own words stay
in ``detail``, which only the log sees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

INTERNAL_MESSAGE = "Something went wrong on our side; please try again."
"""What the user is told about a failure we did not foresee."""


class SparkError(Exception):
    """Base of every error Spark AI Agent raises on purpose.

    ``message`` is written by us and safe to show anyone (clients, documents, the
    model). ``detail`` carries what a provider, Firestore or an SDK said: it may hold
    internals (even part of a key), so it goes to the log only, never further.
    """

    status: int = 500
    code: str = "internal"

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class RequestError(SparkError):
    """The request cannot be served as sent; the caller can fix it."""

    status = 400
    code = "invalid_request"


class InvalidBody(RequestError):
    """A request body that does not validate. ``message`` names each field and what it
    may be, in plain words; ``details`` lists each problem as the validator put it
    (``field``, ``type``, ``detail``), for client code."""

    def __init__(self, message: str, details: Sequence[Mapping[str, str]] = ()) -> None:
        super().__init__(message)
        self.details = [dict(item) for item in details]


class Unauthenticated(RequestError):
    """No valid Firebase ID token came with the request."""

    status = 401
    code = "unauthenticated"


class TokenExpired(Unauthenticated):
    code = "token_expired"


class TokenRevoked(Unauthenticated):
    code = "token_revoked"


class Forbidden(RequestError):
    """The caller is authenticated but may not do this."""

    status = 403
    code = "forbidden"


class ParentOnly(Forbidden):
    """Only a parent of the family may do this (invite, revoke, change roles, remove)."""

    code = "parent_only"


class NotFound(RequestError):
    status = 404
    code = "not_found"


class NoFamily(NotFound):
    """The caller belongs to no family."""

    code = "no_family"


class FamilyNotFound(NotFound):
    """No family with this id is the caller's: whether it exists is not said (no
    enumeration), so it is never 403."""

    code = "family_not_found"


class MemberNotFound(NotFound):
    """The user named is not a member of the caller's family."""

    code = "member_not_found"


class InviteNotFound(NotFound):
    """No invite has this token (unknown or forged), or the caller's family has no
    invite with this id."""

    code = "invite_not_found"


class MethodNotAllowed(RequestError):
    """The path exists; ``allow`` lists the methods it takes (sent as ``Allow``)."""

    status = 405
    code = "method_not_allowed"

    def __init__(self, message: str, allow: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.allow = allow


class NotAcceptable(RequestError):
    status = 406
    code = "not_acceptable"


class RunInProgress(RequestError):
    """The conversation already has a run streaming; one run at a time."""

    status = 409
    code = "run_in_progress"


class NoActiveRun(RequestError):
    """A stop was asked for a conversation with nothing running."""

    status = 409
    code = "no_active_run"


class TaskFinished(RequestError):
    """A cancel was asked for a task that has already ended."""

    status = 409
    code = "task_finished"


class AlreadyAnswered(RequestError):
    """The result (or follow-up) this request would add exists already."""

    status = 409
    code = "already_answered"


class VersionConflict(RequestError):
    """A document was changed since the version a change was made against; the change
    is refused (never written over the other), and ``current`` is the version now."""

    status = 409
    code = "version_conflict"

    def __init__(self, message: str, current: int | None = None) -> None:
        super().__init__(message)
        self.current = current


class AlreadyInFamily(RequestError):
    """One family per user: the caller already belongs to one."""

    status = 409
    code = "already_in_family"


class FamilyFull(RequestError):
    """The family has as many members as it may (``SPARK_FAMILY_MAX_MEMBERS``)."""

    status = 409
    code = "family_full"


class LastParent(RequestError):
    """The change would leave a family with members but no parent."""

    status = 409
    code = "last_parent"


class TooManyInvites(RequestError):
    """The family has as many open invite links as it may keep."""

    status = 409
    code = "too_many_invites"


class VoiceSessionNotFound(NotFound):
    """No live-audio session with this id was minted for the caller (another user's is
    not said to exist)."""

    code = "voice_session_not_found"


class VoiceUnavailable(RequestError):
    """Voice needs an audio provider (OpenAI or Gemini) and this deployment runs
    offline, or on a provider without audio and names none beside it: a live-audio
    session, a spoken reply, or a voice clip with nothing to transcribe it."""

    status = 409
    code = "voice_unavailable"


class VoiceSessionUsed(RequestError):
    """A live-audio session is redeemed once, by the first voice message naming it; it
    then belongs to that conversation and cannot carry messages into another."""

    status = 409
    code = "voice_session_used"


class VoiceSessionEnded(RequestError):
    """The live-audio session is over (``SPARK_VOICE_SESSION_MINUTES`` after it began)."""

    status = 410
    code = "voice_session_ended"


class InviteGone(RequestError):
    """The invite existed but can no longer be used; a new link is needed."""

    status = 410
    code = "invite_gone"


class InviteExpired(InviteGone):
    code = "invite_expired"


class InviteUsedUp(InviteGone):
    code = "invite_used_up"


class InviteRevoked(InviteGone):
    code = "invite_revoked"


class RateLimited(RequestError):
    """A per-user limit was reached; ``retry_after`` says when to try again (seconds)."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, retry_after: int, detail: str | None = None) -> None:
        super().__init__(message, detail)
        self.retry_after = max(1, retry_after)


class SlotsTaken(RateLimited):
    """As many of the user's runs are going as allowed at once. A new message is refused;
    a run that is queued already waits for a slot instead (it is no error of theirs)."""


class PayloadTooLarge(RequestError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(RequestError):
    status = 415
    code = "unsupported_media_type"


class IdempotencyKeyReused(RequestError):
    """An ``Idempotency-Key`` sent again with a different request while its first answer
    is kept (24 hours)."""

    status = 422
    code = "idempotency_key_reused"


class UnprocessableContent(RequestError):
    """The request is well formed but what it refers to cannot be used (a PDF that is
    encrypted or broken)."""

    status = 422
    code = "unprocessable_content"


class NoSpeech(UnprocessableContent):
    """A voice clip in which nothing could be heard: silence, or no words."""

    code = "no_speech"


class ProviderError(SparkError):
    """The model provider failed to give a complete reply."""

    status = 502
    code = "provider_error"


class ProviderUnavailable(ProviderError):
    status = 503
    code = "provider_unavailable"


class ProviderRateLimited(ProviderError):
    status = 503
    code = "provider_rate_limited"


class ProviderSilent(ProviderError):
    """The model's stream sent nothing for ``SPARK_PROVIDER_IDLE_SECONDS``."""

    status = 504
    code = "provider_timeout"


class ProviderRejected(ProviderError):
    code = "provider_rejected"


class IncompleteResponse(ProviderError):
    """The model's stream ended without a finish reason."""

    code = "incomplete_response"


class TaskCancelled(SparkError):
    """Raised at a task tool's next step (a progress step, a model call) once its user
    has asked it to stop: the tool stops there, and its handler ends the task cancelled.
    It never reaches a caller."""


class RunEnded(SparkError):
    """Raised inside a run's own writes: the run record says it is over, so the producer
    must stop at once. The run ends through its own path; this never reaches a caller."""


class RunInterrupted(RunEnded):
    """The run was closed as dead (its lease lapsed) or another delivery took it over."""

    status = 503
    code = "run_interrupted"


class RunStopped(RunEnded):
    """The owner asked the run to stop; it keeps what it streamed and ends ``stopped``."""

    status = 409
    code = "run_stopped"


class AuthUnavailable(SparkError):
    """Tokens cannot be checked right now (e.g. Google's public keys unreachable)."""

    status = 503
    code = "auth_unavailable"


class ContentFiltered(ProviderError):
    """The provider's content filter stopped the reply."""

    code = "content_filtered"


class QueueUnavailable(SparkError):
    """Cloud Tasks (or its emulator) could not take the task."""

    status = 503
    code = "queue_unavailable"


class StoreError(SparkError):
    status = 503
    code = "store_unavailable"


class ConversationTooLarge(StoreError):
    status = 507
    code = "conversation_too_large"


class ConfigurationError(SparkError):
    """The process is configured in a way that must not run (it refuses to start)."""

    code = "misconfigured"


class ToolError(SparkError):
    """A tool failed in a way the model can recover from; the message goes to the model.

    It has a status only so that the tree stays total: a ``ToolError`` that escaped to
    the HTTP edge would be a bug, and 422 says "the request was understood but this
    tool call could not be carried out" more truly than 500.
    """

    status = 422
    code = "tool_error"


class IllegalTransition(SparkError):
    """A task's status was asked to move where ``shared/tasks/sections.TRANSITIONS`` does
    not allow: a bug in the caller, never the user's doing."""

    status = 500
    code = "internal"
