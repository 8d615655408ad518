"""Lessons, their kept versions and each user's progress summary in memory."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

from shared.config import DEFAULT_LESSON_VERSIONS_KEPT
from shared.errors import NotFound, VersionConflict
from shared.lessons import progress
from shared.lessons.progress import KEPT
from shared.schemas.documents import (
    Lesson,
    LessonVersion,
)
from shared.schemas.server import (
    LessonsProgress,
)
from shared.store.accounts import Path
from shared.store.base import (
    NO_LESSON,
    KeptVersion,
    changed,
    kept_out,
    next_version,
)
from shared.store.paging import page


class InMemoryLessonStore:
    """Lessons in a dict, their kept versions beside them, and each user's progress
    summary (``shared/lessons/progress.py``), written with every lesson change as the
    Firestore adapter writes it (``progress_writes`` counts them; ``refills`` counts the
    summaries rebuilt from the lessons)."""

    def __init__(
        self, versions_kept: int = DEFAULT_LESSON_VERSIONS_KEPT, progress_kept: int = KEPT
    ) -> None:
        self._documents: dict[tuple[str, str], dict[str, Any]] = {}
        self._versions: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
        self._progress: dict[str, dict[str, Any]] = {}
        self._kept = versions_kept
        self._progress_kept = progress_kept
        self.progress_writes = 0
        self.refills = 0

    def held(self, user_id: str) -> list[Path]:
        """The paths of ``user_id``'s lessons, their kept versions and progress summary."""
        paths: list[Path] = [_lesson(uid, lid) for uid, lid in self._documents if uid == user_id]
        for (uid, lid), kept in self._versions.items():
            if uid == user_id:
                paths += [(*_lesson(uid, lid), "versions", f"{v:06d}") for v in kept]
        return paths + ([progress.summary_path(user_id)] if user_id in self._progress else [])

    def drop(self, path: Path) -> None:
        if path == progress.summary_path(path[0]):
            self._progress.pop(path[0], None)
        elif len(path) == 4 and path[1:3] == ("client", "lessons"):
            self._documents.pop((path[0], path[3]), None)
        elif len(path) == 6 and path[1:3] == ("client", "lessons") and path[4] == "versions":
            self._versions.get((path[0], path[3]), {}).pop(int(path[5]), None)

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        document = self._documents.get((user_id, lesson_id))
        return None if document is None else Lesson.model_validate(document)

    def _summary(self, user_id: str, lesson_id: str) -> LessonsProgress:
        """The user's summary as stored, or a new one (``progress.started``)."""
        stored = self._progress.get(user_id)
        if stored is not None:
            return LessonsProgress.model_validate(copy.deepcopy(stored))
        alone = all(lid == lesson_id for uid, lid in self._documents if uid == user_id)
        return progress.started(alone)

    def _put_summary(self, user_id: str, summary: LessonsProgress) -> None:
        self._progress[user_id] = summary.to_firestore()
        self.progress_writes += 1

    async def create(self, user_id: str, lesson: Lesson) -> Lesson:
        # No await from the read to the write: atomic, as Firestore's batch with its
        # preconditions. (Counted here, on the loop: the Firestore adapter counts in a
        # worker thread; a fake's writes stay deterministic under a manual clock.)
        counted = progress.counts(lesson)
        stored = self._documents.get((user_id, lesson.id))
        if stored is not None:
            return Lesson.model_validate(stored)
        summary = self._summary(user_id, lesson.id)
        updated = progress.recorded(summary, lesson.id, counted, self._progress_kept)
        self._documents[(user_id, lesson.id)] = lesson.to_firestore()
        self._put_summary(user_id, updated)
        return lesson

    def _keep(self, user_id: str, document: dict[str, Any]) -> None:
        lesson = Lesson.model_validate(document)
        kept = self._versions.setdefault((user_id, lesson.id), {})
        kept[lesson.version] = LessonVersion.of(lesson).to_firestore()
        out = kept_out(lesson.version, self._kept)
        if out is not None:
            kept.pop(out, None)

    async def replace(self, user_id: str, lesson: Lesson, expected_version: int) -> Lesson:
        next_version(lesson, expected_version)
        counted = progress.counts(lesson)
        # Checked and written with no await between: atomic, as Firestore's precondition.
        stored = self._documents.get((user_id, lesson.id))
        if stored is None:
            raise NotFound(NO_LESSON)
        if stored["version"] != expected_version:
            raise VersionConflict(changed(expected_version, stored["version"]), stored["version"])
        summary = self._summary(user_id, lesson.id)
        updated = progress.recorded(summary, lesson.id, counted, self._progress_kept)
        self._keep(user_id, stored)
        self._documents[(user_id, lesson.id)] = lesson.to_firestore()
        self._put_summary(user_id, updated)
        return lesson

    async def delete(self, user_id: str, lesson_id: str) -> bool:
        stored = self._documents.get((user_id, lesson_id))
        if stored is None:
            return False
        summary = self._summary(user_id, lesson_id)
        self._keep(user_id, stored)
        del self._documents[(user_id, lesson_id)]
        self._put_summary(user_id, progress.forgotten(summary, lesson_id))
        return True

    async def recent(self, user_id: str, limit: int) -> list[Lesson]:
        mine = [
            Lesson.model_validate(d) for (uid, _), d in self._documents.items() if uid == user_id
        ]
        return sorted(mine, key=lambda lesson: lesson.updated_at, reverse=True)[:limit]

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[str]:
        return page((lid for uid, lid in self._documents if uid == user_id), after, limit)

    async def progress(self, user_ids: Sequence[str]) -> dict[str, LessonsProgress | None]:
        found: dict[str, LessonsProgress | None] = {}
        for uid in dict.fromkeys(user_ids):
            stored = self._progress.get(uid)
            found[uid] = None if stored is None else LessonsProgress.model_validate(stored)
        return found

    async def refill(self, user_id: str) -> LessonsProgress:
        before = self._progress.get(user_id)
        writes = 0 if before is None else int(before.get("writes", 0))
        lessons = await self.recent(user_id, self._progress_kept)
        summary = await asyncio.to_thread(progress.summarized, lessons, writes, self._progress_kept)
        self.refills += 1
        if self._progress.get(user_id) is before:  # no lesson was written meanwhile
            self._put_summary(user_id, summary)
        return summary

    def summary(self, user_id: str) -> dict[str, Any] | None:
        """The user's progress summary as stored (a copy), for tests and the audit."""
        stored = self._progress.get(user_id)
        return None if stored is None else copy.deepcopy(stored)

    async def versions(self, user_id: str, lesson_id: str) -> list[KeptVersion]:
        kept = [
            LessonVersion.model_validate(d)
            for d in self._versions.get((user_id, lesson_id), {}).values()
        ]
        return [
            KeptVersion(v.version, v.title, v.updated_at, v.characters)
            for v in sorted(kept, key=lambda v: -v.version)
        ]

    async def version(self, user_id: str, lesson_id: str, version: int) -> LessonVersion | None:
        document = self._versions.get((user_id, lesson_id), {}).get(version)
        return None if document is None else LessonVersion.model_validate(document)


def _lesson(user_id: str, lesson_id: str) -> Path:
    return (user_id, "client", "lessons", lesson_id)
