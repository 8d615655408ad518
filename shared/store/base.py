"""The storage interface the agent depends on."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Protocol

from shared.schemas.documents import ArchiveSegment, Conversation, Lesson, RunStatus
from shared.schemas.server import TaskLedger

Mutation = Callable[[Conversation], Conversation]
"""A pure change to a conversation: it may run more than once (on contention).

It returns a new ``Conversation`` made with ``model_copy``, keeping the fields it does
not change *by reference* (and the ``messages`` it keeps): the store writes only what
changed (``shared/store/patch.py``), so a streaming write costs the same at any length.
"""


@dataclass(frozen=True, slots=True)
class RunProbe:
    """The active run of a conversation as a cheap read sees it (no messages read)."""

    run_id: str | None
    status: RunStatus | None


class ConversationStore(Protocol):
    """Conversation documents at ``/{userId}/client/conversations/{conversationId}``.

    Every change goes through ``create`` or ``mutate``, which are atomic: two
    concurrent mutations of one conversation both land, one after the other.
    """

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        """The conversation, or ``None`` if this user has none with this id."""
        ...

    async def create(self, user_id: str, conversation: Conversation) -> None:
        """Store a new conversation (new content: it leaves ``CLOSING_RESERVE`` free).

        Raises:
            ConversationTooLarge: it would not fit, with that room kept.
            StoreError: one with this id already exists, or the store failed.
        """
        ...

    async def mutate(
        self, user_id: str, conversation_id: str, change: Mutation, reserve: int = 0
    ) -> Conversation:
        """Atomically read the latest document, apply ``change`` and write the result.

        ``change`` must be pure: on contention it is called again with the newer
        document. Exceptions it raises abort the write and propagate, once raised on
        the latest version (an adapter that caches versions retries on a fresh read).

        A write that adds new content passes ``reserve=CLOSING_RESERVE``
        (``shared/store/limits.py``): if it would make the document larger and leave
        less than that free, it is refused, so that the writes that close things
        (passing nothing) always find room.

        Returns:
            The conversation as written.

        Raises:
            NotFound: this user has no conversation with this id.
            ConversationTooLarge: the result would not fit in one document (or, with
                ``reserve``, would grow into the room kept for closing).
            StoreError: the store failed.
        """
        ...

    def size(self, user_id: str, conversation_id: str) -> int | None:
        """The stored size of the version this store last wrote or read, if it knows it
        (cheap: no read, no serialisation); ``None`` otherwise."""
        ...

    async def archive(self, user_id: str, segment: ArchiveSegment) -> None:
        """Write (or rewrite: a move that died half-way is redone) one archive segment.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def segments(self, user_id: str, conversation_id: str) -> list[ArchiveSegment]:
        """Every archive segment written for the conversation, in order (including one
        a move left behind: ``Conversation.archived`` says which count)."""
        ...

    async def probe(self, user_id: str, conversation_id: str) -> RunProbe:
        """The id and status of the conversation's active run, read without its messages.

        A producer that has not written for a while calls this about once a second to
        notice a stop request or a takeover.

        Raises:
            NotFound: this user has no conversation with this id.
            StoreError: the store failed.
        """
        ...

    def watch(
        self, user_id: str, conversation_id: str
    ) -> AsyncGenerator[Conversation | None, None]:
        """Follow the conversation: its current state first, then each newer one.

        ``None`` means it does not exist (or was deleted). Intermediate versions may be
        skipped when they arrive faster than they are read; the latest is never skipped.
        Closing the iterator (``aclose``) stops listening.

        Raises:
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


NO_LESSON = "No lesson with this id."


def changed(expected: int, current: int) -> str:
    """What a refused change against a stale version of a lesson is told."""
    return (
        f"The lesson changed since version {expected} (it is now version {current}); "
        "nothing was changed. Read it again and redo the change on the current text."
    )


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

    async def replace(self, user_id: str, lesson: Lesson, expected_version: int) -> Lesson:
        """Store ``lesson``, a new version of a stored one, if the stored one is still at
        ``expected_version`` (checked and written atomically).

        Raises:
            NotFound: this user has no lesson with that id.
            VersionConflict: the stored lesson is at another version.
            StoreError: the store failed.
        """
        ...

    async def delete(self, user_id: str, lesson_id: str) -> bool:
        """Delete the lesson; ``False`` if this user had none with this id.

        Raises:
            StoreError: the store failed.
        """
        ...
