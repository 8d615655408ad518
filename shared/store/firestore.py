"""``ConversationStore`` on Cloud Firestore (the only module that imports it)."""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore import AsyncClient, AsyncTransaction, async_transactional

from shared.errors import NotFound, SparkError, StoreError
from shared.schemas.documents import Conversation
from shared.store.base import Mutation
from shared.store.limits import check_size

# Streaming writes of one conversation and task handlers appending to it contend
# for the same document; the default of five attempts is too few under load.
_MAX_TRANSACTION_ATTEMPTS = 15


class FirestoreConversationStore:
    """Conversations at ``/{userId}/client/conversations/{conversationId}``.

    Mutations run in transactions, so a concurrent append is never lost (a plain
    ``ArrayUnion`` would drop equal elements and could not update a message in place).
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    @classmethod
    def connect(cls, project_id: str) -> FirestoreConversationStore:
        """A store on the project's default database (the emulator if its variable is set)."""
        return cls(AsyncClient(project=project_id))

    def _ref(self, user_id: str, conversation_id: str) -> Any:
        return (
            self._client.collection(user_id)
            .document("client")
            .collection("conversations")
            .document(conversation_id)
        )

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        try:
            snapshot = await self._ref(user_id, conversation_id).get()
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore read failed: {exc.message}") from exc
        if not snapshot.exists:
            return None
        return Conversation.model_validate(snapshot.to_dict())

    async def create(self, user_id: str, conversation: Conversation) -> None:
        document = conversation.to_firestore()
        check_size(document)
        try:
            await self._ref(user_id, conversation.id).create(document)
        except gexc.AlreadyExists as exc:
            raise StoreError(f"conversation {conversation.id} already exists") from exc
        except gexc.GoogleAPICallError as exc:
            raise StoreError(f"Firestore write failed: {exc.message}") from exc

    async def mutate(self, user_id: str, conversation_id: str, change: Mutation) -> Conversation:
        ref = self._ref(user_id, conversation_id)

        @async_transactional
        async def apply(transaction: AsyncTransaction) -> Conversation:
            snapshot = await ref.get(transaction=transaction)
            if not snapshot.exists:
                raise NotFound("No conversation with this id.")
            updated = change(Conversation.model_validate(snapshot.to_dict()))
            document = updated.to_firestore()
            check_size(document)
            transaction.set(ref, document)
            return updated

        try:
            result: Conversation = await apply(
                self._client.transaction(max_attempts=_MAX_TRANSACTION_ATTEMPTS)
            )
        except SparkError:
            raise
        except (gexc.GoogleAPICallError, ValueError) as exc:
            raise StoreError(f"Firestore transaction failed: {exc}") from exc
        return result

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]
