"""The storage interface of lessons, their kept versions and each user's progress
summary, and the rules every lesson store keeps alike."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from shared.schemas.documents import Lesson, LessonVersion
from shared.schemas.server import LessonsProgress

NO_LESSON = "No lesson with this id."


def changed(expected: int, current: int) -> str:
    """What a refused change against a stale version of a lesson is told."""
    return (
        f"The lesson changed since version {expected} (it is now version {current}); "
        "nothing was changed. Read it again and redo the change on the current text."
    )


def next_version(lesson: Lesson, expected_version: int) -> None:
    """Refuse a replacement that is not the next version of the one it replaces.

    Raises:
        ValueError: it is not (a bug in the caller, never the user's doing).
    """
    if lesson.version != expected_version + 1:
        raise ValueError(
            f"lesson {lesson.id}: version {lesson.version} cannot replace {expected_version}"
        )


def kept_out(version: int, kept: int) -> int | None:
    """The kept version that keeping ``version`` pushes out, if any.

    Every change adds one to a lesson's version (``replace`` insists), so the kept
    versions are always the ``kept`` just below the current one, and keeping one more
    drops exactly one: pruning is one delete in the same write, never a query.
    """
    out = version - kept
    return out if out >= 1 else None


@dataclass(frozen=True, slots=True)
class KeptVersion:
    """A kept version of a lesson as a listing shows it (its body is not read)."""

    version: int
    title: str
    saved_at: datetime  # when this version was saved (its ``updatedAt``)
    characters: int


class LessonStore(Protocol):
    """Lessons at ``/{userId}/client/lessons/{lessonId}``, and their earlier versions at
    ``.../versions/{version}``: each ``replace`` and ``delete`` keeps the version it
    overwrites in the same atomic write (so none is ever lost), and drops the oldest past
    the store's ``versions_kept``.

    Each ``create``, ``replace`` and ``delete`` also writes, in that same atomic write, the
    user's progress summary (``LessonsProgress``, ``/{userId}/server/progress/lessons``):
    the lesson's counts (``shared/lessons/progress.counts``, computed here and nowhere
    else) recorded, or its entry dropped.
    """

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
        """Store ``lesson``, the next version of a stored one (``expected_version + 1``),
        if the stored one is still at ``expected_version``; the stored one is kept as a
        version. Checked and written atomically.

        Raises:
            ValueError: ``lesson.version`` is not ``expected_version + 1``.
            NotFound: this user has no lesson with that id.
            VersionConflict: the stored lesson is at another version.
            StoreError: the store failed.
        """
        ...

    async def delete(self, user_id: str, lesson_id: str) -> bool:
        """Delete the lesson, keeping it as a version (so it can be restored); ``False``
        if this user had none with this id.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def recent(self, user_id: str, limit: int) -> list[Lesson]:
        """The user's lessons, the most recently updated first, at most ``limit`` (a
        Firestore query on ``updatedAt``).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[str]:
        """One page of the ids of the user's lessons, in id order: those after ``after``
        (from the first, ``None``), at most ``limit`` (no lesson is read).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def progress(self, user_ids: Sequence[str]) -> dict[str, LessonsProgress | None]:
        """Each user's progress summary as stored (``None``: none yet), read together:
        one small document per user, no lesson read.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def refill(self, user_id: str) -> LessonsProgress:
        """The user's summary rebuilt from their newest ``progress.KEPT`` lessons (each
        one parsed, off the event loop), and stored unless a lesson write changed the
        summary meanwhile (then it is returned, not stored; the next read tries again).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def versions(self, user_id: str, lesson_id: str) -> list[KeptVersion]:
        """The kept versions of the lesson (also of a deleted one), newest first.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def version(self, user_id: str, lesson_id: str, version: int) -> LessonVersion | None:
        """One kept version, or ``None`` if it is not kept.

        Raises:
            StoreError: the store failed.
        """
        ...
