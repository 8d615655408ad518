"""The root of the exception tree: ``SparkError``, with its status, code, user-safe
message and logged detail."""

from __future__ import annotations

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
