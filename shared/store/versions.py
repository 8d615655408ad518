"""A lesson's earlier versions: listing them and restoring one (the API's
``.../versions`` and ``.../restore``, and the ``restore_lesson`` tool).

The store keeps each version a change replaces (``LessonStore``); a restore is one more
change: the kept content becomes a new version, so the version it replaces is kept in
turn and a restore can itself be undone. A deleted lesson's versions are kept too, and
restoring one brings the lesson back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.errors import NotFound, VersionConflict
from shared.schemas.documents import Lesson, LessonVersion
from shared.store.base import NO_LESSON, KeptVersion, LessonStore, changed


@dataclass(frozen=True, slots=True)
class History:
    """A lesson (``None`` once deleted) and its kept versions, newest first."""

    lesson_id: str
    current: Lesson | None
    kept: list[KeptVersion]

    @property
    def latest(self) -> int:
        """The version a restore replaces: the lesson's, or the deleted lesson's last."""
        if self.current is not None:
            return self.current.version
        return self.kept[0].version

    def not_kept(self, version: int) -> str:
        """Why ``version`` cannot be restored, naming those that can."""
        if self.current is not None and version == self.current.version:
            return f"Version {version} is the lesson as it is now; there is nothing to restore."
        numbers = [k.version for k in self.kept]
        if not numbers:
            return f"Version {version} of this lesson is not kept, and no earlier one is."
        return (
            f"Version {version} of this lesson is not kept; the kept versions are "
            + ", ".join(map(str, numbers))
            + "."
        )


async def history(lessons: LessonStore, user_id: str, lesson_id: str) -> History:
    """The lesson and its kept versions.

    Raises:
        NotFound: this user has no such lesson, nor any kept version of one.
        StoreError: the store failed.
    """
    current = await lessons.get(user_id, lesson_id)
    kept = await lessons.versions(user_id, lesson_id)
    if current is None and not kept:
        raise NotFound(NO_LESSON)
    return History(lesson_id, current, kept)


async def kept_version(
    lessons: LessonStore, user_id: str, lesson_id: str, version: int
) -> tuple[History, LessonVersion]:
    """The lesson's history and its kept ``version``.

    Raises:
        NotFound: no such lesson, or that version is not kept (the message says which are).
        StoreError: the store failed.
    """
    found = await history(lessons, user_id, lesson_id)
    kept = await lessons.version(user_id, lesson_id, version)
    if kept is None:
        raise NotFound(found.not_kept(version))
    return found, kept


async def restore(
    lessons: LessonStore,
    user_id: str,
    lesson_id: str,
    version: int,
    now: datetime,
    replacing: int | None = None,
) -> Lesson:
    """Make kept ``version`` the lesson's content again, as its next version (the current
    one is kept by the store); a deleted lesson comes back.

    ``replacing`` is the version the caller means to replace (what its owner approved);
    ``None`` replaces whatever is current, which is kept either way. A restore already
    made over ``replacing`` (a call run again) returns the lesson it made.

    Raises:
        NotFound: no such lesson, or that version is not kept.
        VersionConflict: the lesson is not at ``replacing``, or changed (or came back)
            while this was written: nothing was changed.
        StoreError: the store failed.
    """
    found, kept = await kept_version(lessons, user_id, lesson_id, version)
    latest, current = found.latest, found.current
    if replacing is not None and replacing != latest:
        if current is not None and _made_by(current, kept, replacing):
            return current  # this restore, run again after it was made (at-least-once)
        raise VersionConflict(changed(replacing, latest), latest)
    restored = kept.as_lesson().model_copy(
        update={
            "version": latest + 1,
            "updated_at": now,
            "created_at": (current or kept).created_at,
        }
    )
    if current is not None:
        return await lessons.replace(user_id, restored, latest)
    stored = await lessons.create(user_id, restored)
    if stored != restored:  # brought back by someone else meanwhile
        raise VersionConflict(changed(latest, stored.version), stored.version)
    return stored


def _made_by(current: Lesson, kept: LessonVersion, replacing: int) -> bool:
    """Whether ``current`` is what restoring ``kept`` over version ``replacing`` made."""
    made = kept.as_lesson()
    return current.version == replacing + 1 and (current.title, current.body) == (
        made.title,
        made.body,
    )
