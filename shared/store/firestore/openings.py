"""A send's admission and its message in one commit on Firestore (``OpeningStore``)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from google.cloud.firestore import AsyncClient

from shared.schemas.documents import Conversation
from shared.schemas.server import TaskLedger
from shared.store.base import Opening, OpeningStore, R
from shared.store.firestore.cas import compare_and_set, confirmed, judged
from shared.store.firestore.common import changed_fields
from shared.store.firestore.conversations import (
    FirestoreConversationStore,
    Version,
    write_fields,
)
from shared.store.firestore.ledgers import FirestoreTaskLedgerStore
from shared.store.limits import check_size
from shared.store.patch import Sizes, diff

Known = tuple[dict[str, Any], datetime]


class FirestoreOpeningStore(OpeningStore):
    """The user's ledger and one conversation changed in one batch: each write carries
    its own precondition (the version read, or that none exists yet), and if either
    fails neither lands (Firestore applies a batch's writes together).

    The versions the two stores remember are used and kept, so an opening costs one
    RPC when both are remembered; a new conversation is never read (its id was just
    made: its write is a ``create``). A send used to make two commits in turn, the
    admission's and then the message's, twice the round trips before the first token
    (``bench/stream_overhead.py`` (a)).
    """

    def __init__(
        self,
        client: AsyncClient,
        conversations: FirestoreConversationStore,
        ledgers: FirestoreTaskLedgerStore,
    ) -> None:
        self._client = client
        self._conversations = conversations
        self._ledgers = ledgers

    async def open(
        self,
        user_id: str,
        conversation_id: str,
        change: Opening[R],
        *,
        new: bool,
        reserve: int = 0,
    ) -> tuple[Conversation, R]:
        return await compare_and_set(
            lambda fresh: self._attempt(user_id, conversation_id, change, fresh, new, reserve),
            too_fast="The conversation is changing too fast to save; please try again.",
            forget=lambda: self._conversations.remember(user_id, conversation_id, None),
        )

    async def _read(
        self, user_id: str, conversation_id: str, fresh: bool, new: bool
    ) -> tuple[Known | None, Version | None, bool]:
        """The ledger (as stored, with its update time) and the conversation: those
        remembered unless ``fresh``, the others read now, together. The flag says
        whether either is a remembered guess."""
        known = self._ledgers.recall(user_id)  # (forgotten: a write remembers it again)
        version = self._conversations.remembered(user_id, conversation_id)
        if fresh:
            known, version = None, None
        guessed = known is not None or version is not None
        ledger_read = None if known is not None else self._ledgers.ref(user_id).get()
        unread = version is None and (fresh or not new)
        conversation_read = self._conversations.read(user_id, conversation_id) if unread else None
        if ledger_read is not None and conversation_read is not None:
            snapshot, version = await asyncio.gather(ledger_read, conversation_read)
        elif ledger_read is not None:
            snapshot = await ledger_read
        elif conversation_read is not None:
            snapshot, version = None, await conversation_read
        else:
            snapshot = None
        if snapshot is not None and snapshot.exists:
            known = (snapshot.to_dict(), snapshot.update_time)
        return known, version, guessed

    async def _attempt(
        self,
        user_id: str,
        conversation_id: str,
        change: Opening[R],
        fresh: bool,
        new: bool,
        reserve: int,
    ) -> tuple[Conversation, R]:
        """One compare-and-set (``cas.compare_and_set``) of both, in one batch: what
        was written and what ``change`` decided."""
        known, version, guessed = await self._read(user_id, conversation_id, fresh, new)
        before = known[0] if known is not None else None
        updated_ledger, updated, decided = judged(
            lambda: change(
                TaskLedger() if before is None else TaskLedger.model_validate(before),
                version.conversation if version is not None else None,
            ),
            remembered=guessed,
        )
        document = updated_ledger.to_firestore()
        fields = document if before is None else changed_fields(before, document)
        batch = self._conversations.writes.batch()
        if before is None:
            batch.create(self._ledgers.ref(user_id), document)
        elif fields:
            batch.update(self._ledgers.ref(user_id), fields, known[1] if known else None)
        ref = self._conversations.ref(user_id, conversation_id)
        if version is None:
            stored = updated.to_firestore()
            sizes = Sizes.of(stored)
            check_size(sizes.total, reserve)
            batch.create(ref, stored)
            conversation_written = True
        else:
            patch = diff(version.conversation, updated)
            sizes = version.sizes.after(patch)
            check_size(sizes.total, reserve, version.sizes.total)
            conversation_written = bool(patch)
            confirmed(conversation_written, remembered=guessed)
            if patch:
                batch.update(ref, write_fields(patch), version.update_time)
        ledger_written = before is None or bool(fields)
        results = await batch.commit() if ledger_written or conversation_written else []
        if ledger_written:
            self._ledgers.remember(user_id, document, results[0])
        elif known is not None:
            self._ledgers.remember(user_id, document, known[1])
        if conversation_written:
            written = results[-1]
        else:
            assert version is not None  # (a new conversation is always written)
            written = version.update_time
        self._conversations.remember(user_id, conversation_id, Version(updated, sizes, written))
        return updated, decided
