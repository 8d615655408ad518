"""The task sections on Firestore."""

from __future__ import annotations

from typing import Any

from google.cloud.firestore import AsyncClient
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.ids import reserved
from shared.schemas.documents import TaskDocument
from shared.store.base import SectionChange, TaskDocumentStore
from shared.store.firestore.cas import compare_and_set
from shared.store.firestore.common import changed_fields, in_id_order, unavailable


def sections_of(client: AsyncClient, user_id: str) -> Any:
    """Where a user's task sections are: ``/{userId}/client/tasks``."""
    return client.collection(user_id).document("client").collection("tasks")


class FirestoreTaskDocumentStore(TaskDocumentStore):
    """Task sections at ``/{userId}/client/tasks/{taskId}``, changed by compare-and-set
    (``create`` for a new one, an ``update_time`` precondition for the others): two
    processes writing one section both land, one after the other. Each change reads
    afresh (a section is small, ~1-20 KB, and written at most twice a second)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _tasks(self, user_id: str) -> Any:
        return sections_of(self._client, user_id)

    async def get(self, user_id: str, task_id: str) -> TaskDocument | None:
        if reserved(task_id):
            return None
        with unavailable("Firestore read"):
            snapshot = await self._tasks(user_id).document(task_id).get()
        return TaskDocument.model_validate(snapshot.to_dict()) if snapshot.exists else None

    async def apply(self, user_id: str, task_id: str, change: SectionChange) -> TaskDocument | None:
        if reserved(task_id):
            return None
        ref = self._tasks(user_id).document(task_id)
        return await compare_and_set(
            lambda fresh: self._attempt(ref, change),
            too_fast="The task is changing too fast to save; please try again.",
        )

    async def _attempt(self, ref: Any, change: SectionChange) -> TaskDocument | None:
        """One compare-and-set (``cas.compare_and_set``) of the section, read now."""
        snapshot = await ref.get()
        before = snapshot.to_dict() if snapshot.exists else None
        current = None if before is None else TaskDocument.model_validate(before)
        updated = change(current)
        if updated is None or updated == current:
            return current
        document = updated.to_firestore()
        if before is None:
            await ref.create(document)
        else:
            option = self._client.write_option(last_update_time=snapshot.update_time)
            await ref.update(changed_fields(before, document), option=option)
        return updated

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[TaskDocument]:
        query = in_id_order(self._tasks(user_id), after, limit)
        with unavailable("Firestore read"):
            found = [s.to_dict() or {} async for s in query.stream()]
        return [TaskDocument.model_validate(d) for d in found]

    async def recent(
        self, user_id: str, limit: int = 20, conversation_id: str | None = None
    ) -> list[TaskDocument]:
        tasks = self._tasks(user_id)
        if conversation_id is None:
            query = tasks.order_by("createdAt", direction="DESCENDING")
        else:  # the composite index ``tasks_by_conversation`` (terraform/firestore.tf)
            query = tasks.where(
                filter=FieldFilter("conversationId", "==", conversation_id)
            ).order_by("createdAt", direction="DESCENDING")
        query = query.limit(limit)
        with unavailable("Firestore read"):
            found = [s.to_dict() or {} async for s in query.stream()]
        return [TaskDocument.model_validate(d) for d in found]

    async def delete(self, user_id: str, conversation_id: str) -> int:
        query = self._tasks(user_id).where(
            filter=FieldFilter("conversationId", "==", conversation_id)
        )
        with unavailable("Firestore delete"):
            refs = [s.reference async for s in query.stream()]
            for start in range(0, len(refs), 500):
                batch = self._client.batch()
                for ref in refs[start : start + 500]:
                    batch.delete(ref)
                await batch.commit()
        return len(refs)
