"""The errors of a request the caller can fix: a body, a token, a method, a limit, or a
conversation or task in a state that refuses it (4xx)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shared.errors.base import SparkError


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


class NotFound(RequestError):
    status = 404
    code = "not_found"


class AccountDeleted(RequestError):
    """The caller's account is being erased (or was): nothing more is written for it."""

    status = 410
    code = "account_deleted"


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


class RateLimited(RequestError):
    """A per-user limit was reached; ``retry_after`` says when to try again (seconds);
    ``limit`` names which (``daily_tokens``: what ``spark.limits.refused`` counts by)."""

    status = 429
    code = "rate_limited"
    limit = "other"

    def __init__(
        self,
        message: str,
        retry_after: int,
        detail: str | None = None,
        *,
        limit: str | None = None,
    ) -> None:
        super().__init__(message, detail)
        self.retry_after = max(1, retry_after)
        if limit is not None:
            self.limit = limit


class SlotsTaken(RateLimited):
    """As many of the user's runs are going as allowed at once. A new message is refused;
    a run that is queued already waits for a slot instead (it is no error of theirs)."""

    limit = "runs_at_once"


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
