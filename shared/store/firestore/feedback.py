"""A person's ratings of replies on Firestore, under ``/{uid}/server/feedback/``."""

from __future__ import annotations

from google.api_core import exceptions as gexc
from google.cloud.firestore import AsyncClient
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.errors import NotFound
from shared.schemas.server import FeedbackRecord
from shared.store.feedback import feedback_collection, feedback_path
from shared.store.firestore.common import unavailable
from shared.store.firestore.conversations import conversation_ref
from shared.store.firestore.raw import Writes, exists_write, set_write

# A batch deletes at most this many documents (Firestore's limit is 500 writes).
_BATCH = 400


class FirestoreFeedbackStore:
    """``FeedbackStore`` on Firestore: a record per rated reply."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._writes = Writes(client)

    async def keep(self, user_id: str, record: FeedbackRecord) -> None:
        path = feedback_path(user_id, record.conversation_id, record.message_id)
        conversation = conversation_ref(self._client, user_id, record.conversation_id)
        # One commit: the record lands only beside a conversation that exists.
        writes = [
            exists_write(conversation._document_path),
            set_write(self._client.document(*path)._document_path, record.to_firestore()),
        ]
        with unavailable("Firestore write of feedback"):
            try:
                await self._writes.commit(writes)
            except gexc.NotFound as exc:
                raise NotFound("No conversation with this id.") from exc

    async def forget(self, user_id: str, conversation_id: str) -> None:
        query = self._client.collection(*feedback_collection(user_id)).where(
            filter=FieldFilter("conversationId", "==", conversation_id)
        )
        with unavailable("Firestore delete of feedback"):
            refs = [snapshot.reference async for snapshot in query.stream()]
            for start in range(0, len(refs), _BATCH):
                batch = self._client.batch()
                for ref in refs[start : start + _BATCH]:
                    batch.delete(ref)
                await batch.commit()

    async def of(self, user_id: str) -> list[FeedbackRecord]:
        collection = self._client.collection(*feedback_collection(user_id))
        with unavailable("Firestore read of feedback"):
            found = [
                FeedbackRecord.model_validate(s.to_dict() or {}) async for s in collection.stream()
            ]
        return sorted(found, key=lambda r: r.at)
