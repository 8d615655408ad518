"""Where a person's ratings of replies are kept server-side (DESIGN §15): one record
per rated reply under ``/{uid}/server/feedback/``, for quality review, beside the
``feedback`` the author sees on the message itself."""

from __future__ import annotations

from typing import Protocol

from shared.schemas.server import FeedbackRecord

Path = tuple[str, ...]


def feedback_path(user_id: str, conversation_id: str, message_id: str) -> Path:
    """A reply's feedback record: one per reply, so a new rating replaces the last."""
    return (user_id, "server", "feedback", f"{conversation_id}.{message_id}")


def feedback_collection(user_id: str) -> Path:
    return (user_id, "server", "feedback")


class FeedbackStore(Protocol):
    """A person's ratings of replies, kept for quality review."""

    async def keep(self, user_id: str, record: FeedbackRecord) -> None:
        """Keep ``record`` (replacing the reply's earlier one), on the condition that its
        conversation still exists: a rating that lands as its conversation is deleted
        leaves no record behind it (the delete forgets the records after the document).

        Raises:
            NotFound: the conversation does not exist (nothing was kept).
            StoreError: the store failed.
        """
        ...

    async def forget(self, user_id: str, conversation_id: str) -> None:
        """Delete every record of ``conversation_id``'s replies (none: nothing to do).

        Raises:
            StoreError: the store failed (again finishes it).
        """
        ...

    async def of(self, user_id: str) -> list[FeedbackRecord]:
        """Every record of ``user_id``'s, oldest first.

        Raises:
            StoreError: the store failed.
        """
        ...
