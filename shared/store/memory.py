"""An in-memory ``ConversationStore`` for unit tests and offline runs."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from shared.errors import NotFound, StoreError
from shared.schemas.documents import Conversation
from shared.store.base import Mutation
from shared.store.limits import check_size


class InMemoryConversationStore:
    """Keeps documents as Firestore would: serialised dicts, one lock per store.

    ``writes`` counts every successful write, per conversation, so tests can check
    the throttling of streamed messages.
    """

    def __init__(self) -> None:
        self._documents: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self.writes: dict[str, int] = {}

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        document = self._documents.get((user_id, conversation_id))
        return None if document is None else Conversation.model_validate(copy.deepcopy(document))

    async def create(self, user_id: str, conversation: Conversation) -> None:
        async with self._lock:
            key = (user_id, conversation.id)
            if key in self._documents:
                raise StoreError(f"conversation {conversation.id} already exists")
            self._write(key, conversation)

    async def mutate(self, user_id: str, conversation_id: str, change: Mutation) -> Conversation:
        async with self._lock:
            current = await self.get(user_id, conversation_id)
            if current is None:
                raise NotFound("No conversation with this id.")
            updated = change(current)
            self._write((user_id, conversation_id), updated)
            return updated

    def _write(self, key: tuple[str, str], conversation: Conversation) -> None:
        document = conversation.to_firestore()
        check_size(document)
        self._documents[key] = copy.deepcopy(document)
        self.writes[key[1]] = self.writes.get(key[1], 0) + 1
