"""The failures on our side or a service's: the model provider, a run that must stop, a
cancelled task, Auth, Cloud Tasks, Firestore, the configuration, a tool and a bug."""

from __future__ import annotations

from shared.errors.base import SparkError


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


class ModerationUnavailable(ProviderError):
    """The moderator failed or did not answer within its bound (DESIGN §16): a turn it
    had to judge is not answered (``SPARK_MODERATION_FAIL=closed``)."""

    status = 503
    code = "moderation_unavailable"


class ProviderRejected(ProviderError):
    code = "provider_rejected"


class IncompleteResponse(ProviderError):
    """The model's stream ended without a finish reason."""

    code = "incomplete_response"


class TaskCancelled(SparkError):
    """Raised at a task tool's next step (a progress step, a model call) once its user
    has asked it to stop: the tool stops there, and its handler ends the task cancelled.
    It never reaches a caller."""


class ConversationTouched(SparkError):
    """A retention sweep's delete found the conversation changed since its cutoff: it is
    kept (nothing deleted). It never reaches a caller."""

    status = 409
    code = "conversation_touched"


class TurnModerated(SparkError):
    """A run learns its user's turn was flagged by the moderator (DESIGN §16): it is
    answered by ``reply``, a fixed kind reply, never by the model (never an answer)."""

    def __init__(self, category: str, reply: str) -> None:
        super().__init__(reply, detail=f"flagged: {category}")
        self.category = category
        self.reply = reply


class ReplyWithheld(SparkError):
    """The moderator flagged a passage of the reply (DESIGN §16): the run ends as
    ``withheld``, and what had streamed is replaced by a note."""

    status = 200
    code = "withheld"

    def __init__(self, category: str) -> None:
        super().__init__(WITHHELD_NOTE, detail=f"flagged: {category}")
        self.category = category


WITHHELD_NOTE = (
    "Spark AI Agent stopped this reply because part of it was not suitable. "
    "Please ask in a different way, or ask about something else."
)


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


class Busy(SparkError):
    """The instance holds as many request bodies as its memory allows (an AI SDK chat's:
    ``SPARK_CHAT_BODY_BUDGET_BYTES``); ``retry_after`` says when to try again (seconds).
    Another instance, or this one a moment later, has room."""

    status = 503
    code = "busy"

    def __init__(self, message: str, retry_after: int, detail: str | None = None) -> None:
        super().__init__(message, detail)
        self.retry_after = max(1, retry_after)


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
