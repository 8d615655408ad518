"""A person's ratings of replies, in memory."""

from __future__ import annotations

import copy
from typing import Any

from shared.errors import NotFound
from shared.schemas.server import FeedbackRecord
from shared.store.base import ConversationStore
from shared.store.feedback import feedback_path


class InMemoryFeedbackStore:
    """The records as documents by path, as Firestore holds them, beside the
    conversations of ``conversations`` (a record is kept only beside one that exists)."""

    def __init__(self, conversations: ConversationStore) -> None:
        self.documents: dict[tuple[str, ...], dict[str, Any]] = {}
        self._conversations = conversations

    async def keep(self, user_id: str, record: FeedbackRecord) -> None:
        path = feedback_path(user_id, record.conversation_id, record.message_id)
        # In one process, with no await between the read and the write: as atomic as
        # Firestore's precondition.
        if await self._conversations.get(user_id, record.conversation_id) is None:
            raise NotFound("No conversation with this id.")
        self.documents[path] = copy.deepcopy(record.to_firestore())

    async def forget(self, user_id: str, conversation_id: str) -> None:
        for path in [p for p in self.documents if p[0] == user_id]:
            if self.documents[path]["conversationId"] == conversation_id:
                del self.documents[path]

    async def of(self, user_id: str) -> list[FeedbackRecord]:
        found = [
            FeedbackRecord.model_validate(d) for p, d in self.documents.items() if p[0] == user_id
        ]
        return sorted(found, key=lambda r: r.at)
