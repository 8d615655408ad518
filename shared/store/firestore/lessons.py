"""The lessons, and their kept versions, on Firestore."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from google.cloud.firestore import AsyncClient

from shared.config import DEFAULT_LESSON_VERSIONS_KEPT
from shared.errors import NotFound, VersionConflict
from shared.ids import reserved
from shared.lessons import progress
from shared.schemas.documents import Lesson, LessonVersion
from shared.schemas.server import LessonsProgress
from shared.store.base import NO_LESSON, KeptVersion, changed, kept_out, next_version
from shared.store.firestore.cas import LOST, compare_and_set
from shared.store.firestore.common import changed_fields, ids_after, unavailable

TOO_FAST = "The lesson is changing too fast to save; please try again."


class FirestoreLessonStore:
    """Lessons at ``/{userId}/client/lessons/{lessonId}`` (clients read them), their
    kept versions at ``.../versions/{version:06d}`` (clients read those too), and each
    user's progress summary at ``/{userId}/server/progress/lessons`` (server-only).

    A change is one batch: the lesson's write, with the precondition that it is still
    the version read (or, new, that there is none), the version it replaces, the
    deletion of the version that one pushes out, and the progress summary with the
    lesson's counts, with the precondition that it too is still the version read. A
    batch is atomic, so a version is kept exactly when it is replaced, and the summary
    says what every lesson says. A batch refused only because the summary changed (the
    user's other lesson written meanwhile) is made again on fresh reads.
    """

    def __init__(
        self,
        client: AsyncClient,
        versions_kept: int = DEFAULT_LESSON_VERSIONS_KEPT,
        progress_kept: int = progress.KEPT,
    ) -> None:
        self._client = client
        self._kept = versions_kept
        self._progress_kept = progress_kept

    def _lessons(self, user_id: str) -> Any:
        return self._client.collection(user_id).document("client").collection("lessons")

    def _ref(self, user_id: str, lesson_id: str) -> Any:
        return self._lessons(user_id).document(lesson_id)

    def _summary_ref(self, user_id: str) -> Any:
        return self._client.document(*progress.summary_path(user_id))

    def _versions(self, user_id: str, lesson_id: str) -> Any:
        return self._ref(user_id, lesson_id).collection("versions")

    def _keep(self, batch: Any, user_id: str, lesson: Lesson) -> None:
        """Add keeping ``lesson`` (and dropping the version it pushes out) to ``batch``."""
        versions = self._versions(user_id, lesson.id)
        batch.set(
            versions.document(f"{lesson.version:06d}"), LessonVersion.of(lesson).to_firestore()
        )
        out = kept_out(lesson.version, self._kept)
        if out is not None:
            batch.delete(versions.document(f"{out:06d}"))

    async def _read(self, user_id: str, lesson_id: str) -> tuple[Any, Any]:
        """The lesson's snapshot and the user's summary's, read together."""
        lesson, summary = await asyncio.gather(
            self._ref(user_id, lesson_id).get(), self._summary_ref(user_id).get()
        )
        return lesson, summary

    async def _summary(self, user_id: str, lesson_id: str, snapshot: Any) -> LessonsProgress:
        """The summary as read, or a new one: complete if the user has no other lesson."""
        if snapshot.exists:
            return LessonsProgress.model_validate(snapshot.to_dict())
        listing = self._lessons(user_id).select(["__name__"]).limit(2)
        others = [s.id async for s in listing.stream() if s.id != lesson_id]
        return progress.started(alone=not others)

    def _put_summary(
        self, batch: Any, user_id: str, snapshot: Any, summary: LessonsProgress
    ) -> None:
        """Add writing ``summary`` over the version ``snapshot`` read (or, if there was
        none, on the condition that there still is none) to ``batch``."""
        ref = self._summary_ref(user_id)
        if snapshot.exists:
            option = self._client.write_option(last_update_time=snapshot.update_time)
            batch.update(ref, summary.to_firestore(), option=option)
        else:
            batch.create(ref, summary.to_firestore())

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        if reserved(lesson_id):
            return None
        with unavailable("Firestore read"):
            snapshot = await self._ref(user_id, lesson_id).get()
        return Lesson.model_validate(snapshot.to_dict()) if snapshot.exists else None

    async def create(self, user_id: str, lesson: Lesson) -> Lesson:
        counted = await asyncio.to_thread(progress.counts, lesson)
        ref = self._ref(user_id, lesson.id)

        async def attempt(fresh: bool) -> Lesson:
            stored, snapshot = await self._read(user_id, lesson.id)
            if stored.exists:
                return Lesson.model_validate(stored.to_dict())
            summary = await self._summary(user_id, lesson.id, snapshot)
            batch = self._client.batch()
            batch.create(ref, lesson.to_firestore())
            recorded = progress.recorded(summary, lesson.id, counted, self._progress_kept)
            self._put_summary(batch, user_id, snapshot, recorded)
            await batch.commit()  # lost if it was made meanwhile, or the summary changed
            return lesson

        return await compare_and_set(attempt, too_fast=TOO_FAST)

    async def replace(self, user_id: str, lesson: Lesson, expected_version: int) -> Lesson:
        next_version(lesson, expected_version)
        counted = await asyncio.to_thread(progress.counts, lesson)
        ref = self._ref(user_id, lesson.id)

        async def attempt(fresh: bool) -> Lesson:
            # A lost commit is judged again on fresh reads: the lesson changed (refused
            # here), or only the summary did (written again).
            stored, snapshot = await self._read(user_id, lesson.id)
            if not stored.exists:
                raise NotFound(NO_LESSON)
            before = stored.to_dict() or {}
            current = Lesson.model_validate(before)
            if current.version != expected_version:
                raise VersionConflict(changed(expected_version, current.version), current.version)
            summary = await self._summary(user_id, lesson.id, snapshot)
            batch = self._client.batch()
            # The version read above is the one overwritten (and kept), or nothing is.
            option = self._client.write_option(last_update_time=stored.update_time)
            batch.update(ref, changed_fields(before, lesson.to_firestore()), option=option)
            self._keep(batch, user_id, current)
            recorded = progress.recorded(summary, lesson.id, counted, self._progress_kept)
            self._put_summary(batch, user_id, snapshot, recorded)
            await batch.commit()
            return lesson

        return await compare_and_set(attempt, too_fast=TOO_FAST)

    async def delete(self, user_id: str, lesson_id: str) -> bool:
        if reserved(lesson_id):
            return False
        ref = self._ref(user_id, lesson_id)

        async def attempt(fresh: bool) -> bool:
            # A save that lands between the read and the delete fails the precondition:
            # read again and delete what is there now (it is kept as a version, like the
            # one read first), rather than report a deletion that did not happen.
            stored, snapshot = await self._read(user_id, lesson_id)
            if not stored.exists:
                return False  # deleted meanwhile by someone else
            summary = await self._summary(user_id, lesson_id, snapshot)
            batch = self._client.batch()
            option = self._client.write_option(last_update_time=stored.update_time)
            batch.delete(ref, option=option)
            self._keep(batch, user_id, Lesson.model_validate(stored.to_dict()))
            self._put_summary(batch, user_id, snapshot, progress.forgotten(summary, lesson_id))
            await batch.commit()
            return True

        return await compare_and_set(
            attempt,
            too_fast="The lesson is changing too fast to delete; please try again.",
            tried="Firestore delete",
        )

    async def progress(self, user_ids: Sequence[str]) -> dict[str, LessonsProgress | None]:
        refs = {self._summary_ref(uid).path: uid for uid in user_ids}
        found: dict[str, LessonsProgress | None] = dict.fromkeys(refs.values())
        if not refs:
            return found
        with unavailable("Firestore read"):
            wanted = [self._summary_ref(uid) for uid in found]
            async for snapshot in self._client.get_all(wanted):
                if snapshot.exists:
                    uid = refs[snapshot.reference.path]
                    found[uid] = LessonsProgress.model_validate(snapshot.to_dict())
        return found

    async def refill(self, user_id: str) -> LessonsProgress:
        ref = self._summary_ref(user_id)
        with unavailable("Firestore read"):
            snapshot = await ref.get()
            lessons = await self.recent(user_id, self._progress_kept)
        writes = int((snapshot.to_dict() or {}).get("writes", 0)) if snapshot.exists else 0
        summary = await asyncio.to_thread(progress.summarized, lessons, writes, self._progress_kept)
        batch = self._client.batch()
        self._put_summary(batch, user_id, snapshot, summary)
        # Refused if a lesson was written meanwhile: the next read refills again.
        with unavailable("Firestore write"), contextlib.suppress(*LOST):
            await batch.commit()
        return summary

    async def recent(self, user_id: str, limit: int) -> list[Lesson]:
        listing = self._lessons(user_id).order_by("updatedAt", direction="DESCENDING").limit(limit)
        with unavailable("Firestore read"):
            snapshots = [s async for s in listing.stream()]
        return [Lesson.model_validate(s.to_dict()) for s in snapshots]

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[str]:
        return await ids_after(self._lessons(user_id), after, limit)

    async def versions(self, user_id: str, lesson_id: str) -> list[KeptVersion]:
        if reserved(lesson_id):
            return []
        listing = (
            self._versions(user_id, lesson_id)
            .select(["version", "title", "updatedAt", "characters"])
            .order_by("version", direction="DESCENDING")
        )
        with unavailable("Firestore read"):
            snapshots = [s async for s in listing.stream()]
        found = [s.to_dict() or {} for s in snapshots]
        return [
            KeptVersion(int(d["version"]), str(d["title"]), d["updatedAt"], int(d["characters"]))
            for d in found
        ]

    async def version(self, user_id: str, lesson_id: str, version: int) -> LessonVersion | None:
        if reserved(lesson_id):
            return None
        with unavailable("Firestore read"):
            snapshot = await self._versions(user_id, lesson_id).document(f"{version:06d}").get()
        return LessonVersion.model_validate(snapshot.to_dict()) if snapshot.exists else None
