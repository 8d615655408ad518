"""The storage interface the agent depends on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from shared.schemas.documents import Conversation, Lesson
from shared.schemas.server import TaskLedger

Mutation = Callable[[Conversation], Conversation]
"""A pure change to a conversation: it may run more than once (on contention)."""


class ConversationStore(Protocol):
    """Conversation documents at ``/{userId}/client/conversations/{conversationId}``.

    Every change goes through ``create`` or ``mutate``, which are atomic: two
    concurrent mutations of one conversation both land, one after the other.
    """

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        """The conversation, or ``None`` if this user has none with this id."""
        ...

    async def create(self, user_id: str, conversation: Conversation) -> None:
        """Store a new conversation.

        Raises:
            StoreError: one with this id already exists, or the store failed.
        """
        ...

    async def mutate(self, user_id: str, conversation_id: str, change: Mutation) -> Conversation:
        """Atomically read the latest document, apply ``change`` and write the result.

        ``change`` must be pure: on contention it is called again with the newer
        document. Exceptions it raises abort the write and propagate.

        Returns:
            The conversation as written.

        Raises:
            NotFound: this user has no conversation with this id.
            ConversationTooLarge: the result would not fit in one document.
            StoreError: the store failed.
        """
        ...


LedgerChange = Callable[[TaskLedger], TaskLedger]


class TaskLedgerStore(Protocol):
    """Each user's task ledger at ``/{userId}/server`` (server-only)."""

    async def get(self, user_id: str) -> TaskLedger:
        """The ledger (empty if the user never had a task)."""
        ...

    async def mutate(self, user_id: str, change: LedgerChange) -> TaskLedger:
        """Atomically apply ``change`` (pure, may run more than once) and write the result.

        Raises:
            StoreError: the store failed.
        """
        ...


class LessonStore(Protocol):
    """Lessons at ``/{userId}/client/lessons/{lessonId}``."""

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        """The lesson, or ``None`` if this user has none with this id."""
        ...

    async def create(self, user_id: str, lesson: Lesson) -> Lesson:
        """Store ``lesson`` unless one with its id exists; returns the stored one.

        Raises:
            StoreError: the store failed.
        """
        ...
