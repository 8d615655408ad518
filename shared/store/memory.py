"""In-memory stores for unit tests and offline runs (documents kept as Firestore would:
serialised dicts, so what is read back went through the same validation)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from shared.errors import NotFound, StoreError
from shared.schemas.documents import Conversation, Lesson
from shared.schemas.server import TaskLedger
from shared.store.base import LedgerChange, Mutation
from shared.store.limits import check_size


class InMemoryConversationStore:
    """Conversations in a dict, one lock per store.

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


class InMemoryTaskLedgerStore:
    """Task ledgers in a dict, one lock per store."""

    def __init__(self) -> None:
        self._documents: dict[str, dict[str, Any]] = {}
        self._lock = asyncio.Lock()

    async def get(self, user_id: str) -> TaskLedger:
        document = self._documents.get(user_id)
        return TaskLedger() if document is None else TaskLedger.model_validate(document)

    async def mutate(self, user_id: str, change: LedgerChange) -> TaskLedger:
        async with self._lock:
            updated = change(await self.get(user_id))
            self._documents[user_id] = copy.deepcopy(updated.to_firestore())
            return updated


class InMemoryLessonStore:
    """Lessons in a dict."""

    def __init__(self) -> None:
        self._documents: dict[tuple[str, str], dict[str, Any]] = {}

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        document = self._documents.get((user_id, lesson_id))
        return None if document is None else Lesson.model_validate(document)

    async def create(self, user_id: str, lesson: Lesson) -> Lesson:
        document = self._documents.setdefault((user_id, lesson.id), lesson.to_firestore())
        return Lesson.model_validate(document)
