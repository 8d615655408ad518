"""The lessons, and their kept versions, on Firestore."""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore import AsyncClient

from shared.config import DEFAULT_LESSON_VERSIONS_KEPT
from shared.errors import NotFound, StoreError, VersionConflict
from shared.schemas.documents import Lesson, LessonVersion
from shared.store.base import NO_LESSON, KeptVersion, changed, kept_out, next_version, reserved
from shared.store.firestore.common import MAX_ATTEMPTS, back_off, changed_fields, unavailable


class FirestoreLessonStore:
    """Lessons at ``/{userId}/client/lessons/{lessonId}`` (clients read them), and their
    kept versions at ``.../versions/{version:06d}`` (clients read those too).

    A change is one batch: the lesson's update, with the precondition that it is still
    the version read, the version it replaces, and the deletion of the version that one
    pushes out. A batch is atomic, so a version is kept exactly when it is replaced.
    """

    def __init__(
        self, client: AsyncClient, versions_kept: int = DEFAULT_LESSON_VERSIONS_KEPT
    ) -> None:
        self._client = client
        self._kept = versions_kept

    def _ref(self, user_id: str, lesson_id: str) -> Any:
        return (
            self._client.collection(user_id)
            .document("client")
            .collection("lessons")
            .document(lesson_id)
        )

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

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        if reserved(lesson_id):
            return None
        with unavailable("Firestore read"):
            snapshot = await self._ref(user_id, lesson_id).get()
        return Lesson.model_validate(snapshot.to_dict()) if snapshot.exists else None

    async def create(self, user_id: str, lesson: Lesson) -> Lesson:
        with unavailable("Firestore write"):
            try:
                await self._ref(user_id, lesson.id).create(lesson.to_firestore())
            except gexc.AlreadyExists:
                existing = await self.get(user_id, lesson.id)
                if existing is not None:
                    return existing
                raise StoreError("The lesson vanished while it was being saved.") from None
        return lesson

    async def replace(self, user_id: str, lesson: Lesson, expected_version: int) -> Lesson:
        next_version(lesson, expected_version)
        ref = self._ref(user_id, lesson.id)
        with unavailable("Firestore write"):
            try:
                snapshot = await ref.get()
                if not snapshot.exists:
                    raise NotFound(NO_LESSON)
                before = snapshot.to_dict() or {}
                current = Lesson.model_validate(before)
                if current.version != expected_version:
                    raise VersionConflict(
                        changed(expected_version, current.version), current.version
                    )
                batch = self._client.batch()
                # The version read above is the one overwritten (and kept), or nothing is.
                option = self._client.write_option(last_update_time=snapshot.update_time)
                batch.update(ref, changed_fields(before, lesson.to_firestore()), option=option)
                self._keep(batch, user_id, current)
                await batch.commit()
            except (gexc.FailedPrecondition, gexc.NotFound):
                now = await self.get(user_id, lesson.id)
                if now is None:
                    raise NotFound(NO_LESSON) from None
                raise VersionConflict(changed(expected_version, now.version), now.version) from None
        return lesson

    async def delete(self, user_id: str, lesson_id: str) -> bool:
        if reserved(lesson_id):
            return False
        ref = self._ref(user_id, lesson_id)
        # A save that lands between the read and the delete fails the precondition: read
        # again and delete what is there now (it is kept as a version, like the one read
        # first), rather than report a deletion that did not happen.
        for attempt in range(MAX_ATTEMPTS):
            with unavailable("Firestore delete"):
                snapshot = await ref.get()
                if not snapshot.exists:
                    return False  # deleted meanwhile by someone else
                batch = self._client.batch()
                option = self._client.write_option(last_update_time=snapshot.update_time)
                batch.delete(ref, option=option)
                self._keep(batch, user_id, Lesson.model_validate(snapshot.to_dict()))
                try:
                    await batch.commit()
                except (gexc.FailedPrecondition, gexc.NotFound):
                    await back_off(attempt)
                    continue
            return True
        raise StoreError("The lesson is changing too fast to delete; please try again.")

    async def recent(self, user_id: str, limit: int) -> list[Lesson]:
        listing = (
            self._client.collection(user_id)
            .document("client")
            .collection("lessons")
            .order_by("updatedAt", direction="DESCENDING")
            .limit(limit)
        )
        with unavailable("Firestore read"):
            snapshots = [s async for s in listing.stream()]
        return [Lesson.model_validate(s.to_dict()) for s in snapshots]

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
