"""Task ledgers, their sections, and openings (a send's admission with its message) in
memory."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from shared.errors import StoreError
from shared.schemas.documents import (
    Conversation,
    TaskDocument,
)
from shared.schemas.server import (
    TaskLedger,
)
from shared.store.accounts import Path
from shared.store.base import (
    ConversationStore,
    LedgerAndSections,
    Opening,
    OpeningStore,
    R,
    SectionChange,
    TaskDocumentStore,
    TaskLedgerStore,
)
from shared.store.limits import check_size
from shared.store.memory.conversations import InMemoryConversationStore
from shared.store.paging import page
from shared.store.patch import Sizes, apply, diff


class InMemoryTaskLedgerStore(TaskLedgerStore):
    """Task ledgers in a dict, one lock per store, and the sections written with them
    (``sections``: the section store this one writes into, its own unless given).
    ``writes`` counts the changes written (a change that changes nothing writes nothing,
    as on Firestore), so tests can check that a refused request wrote none."""

    def __init__(self, sections: InMemoryTaskDocumentStore | None = None) -> None:
        self._documents: dict[str, dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self.writes = 0
        self.sections = sections if sections is not None else InMemoryTaskDocumentStore()

    async def get(self, user_id: str) -> TaskLedger:
        document = self._documents.get(user_id)
        return TaskLedger() if document is None else TaskLedger.model_validate(document)

    @property
    def lock(self) -> asyncio.Lock:
        """Held by each change (a write across stores holds it too)."""
        return self._lock

    def put(self, user_id: str, ledger: TaskLedger) -> None:
        """Store ``ledger``, counted as a write if it changed: for a holder of ``lock``."""
        document = ledger.to_firestore()
        if document != self._documents.get(user_id):
            self._documents[user_id] = copy.deepcopy(document)
            self.writes += 1

    def held(self, user_id: str) -> list[Path]:
        """The ledger's path, if ``user_id`` has one (``/{uid}/server``)."""
        return [(user_id, "server")] if user_id in self._documents else []

    def drop(self, path: Path) -> None:
        if len(path) == 2 and path[1] == "server":
            self._documents.pop(path[0], None)

    async def apply_with_sections(
        self, user_id: str, change: LedgerAndSections[R]
    ) -> tuple[TaskLedger, R]:
        async with self._lock:
            updated, decided, named = change(await self.get(user_id))
            sections = self.sections.changed(user_id, named)
            # Every change has run: the sections go in first (``put`` may fail, as a
            # commit may, before anything is kept), then the ledger, with no await
            # in between.
            self.sections.put(user_id, sections)
            self.put(user_id, updated)
            return updated, decided


class InMemoryTaskDocumentStore(TaskDocumentStore):
    """Task sections in a dict; ``writes`` counts each task's writes (throttling tests)."""

    def __init__(self) -> None:
        self._documents: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes: dict[str, int] = {}

    async def get(self, user_id: str, task_id: str) -> TaskDocument | None:
        return self._read(user_id, task_id)

    def _read(self, user_id: str, task_id: str) -> TaskDocument | None:
        document = self._documents.get((user_id, task_id))
        return None if document is None else TaskDocument.model_validate(copy.deepcopy(document))

    async def apply(self, user_id: str, task_id: str, change: SectionChange) -> TaskDocument | None:
        # No await between the read and the write: atomic, as Firestore's precondition.
        current = self._read(user_id, task_id)
        updated = self.changed(user_id, {task_id: change}).get(task_id)
        if updated is None:
            return current
        self.put(user_id, {task_id: updated})
        return updated

    def changed(
        self, user_id: str, changes: Mapping[str, SectionChange]
    ) -> dict[str, TaskDocument]:
        """The sections ``changes`` change, as they would be written (none is written)."""
        written: dict[str, TaskDocument] = {}
        for task_id, change in changes.items():
            current = self._read(user_id, task_id)
            updated = change(current)
            if updated is not None and updated != current:
                written[task_id] = updated
        return written

    def put(self, user_id: str, sections: Mapping[str, TaskDocument]) -> None:
        """Write ``sections`` (by task id), all at once."""
        for task_id, section in sections.items():
            self._documents[(user_id, task_id)] = section.to_firestore()
            self.writes[task_id] = self.writes.get(task_id, 0) + 1

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[TaskDocument]:
        ids = page((tid for uid, tid in self._documents if uid == user_id), after, limit)
        return [TaskDocument.model_validate(self._documents[(user_id, t)]) for t in ids]

    def held(self, user_id: str) -> list[Path]:
        """The paths of ``user_id``'s sections (``/{uid}/client/tasks/{taskId}``)."""
        return [(uid, "client", "tasks", tid) for uid, tid in self._documents if uid == user_id]

    def drop(self, path: Path) -> None:
        if len(path) == 4 and path[1:3] == ("client", "tasks"):
            self._documents.pop((path[0], path[3]), None)

    async def recent(
        self, user_id: str, limit: int = 20, conversation_id: str | None = None
    ) -> list[TaskDocument]:
        mine = [
            TaskDocument.model_validate(d)
            for (uid, _), d in self._documents.items()
            if uid == user_id and conversation_id in (None, d["conversationId"])
        ]
        return sorted(mine, key=lambda t: t.created_at, reverse=True)[:limit]

    async def delete(self, user_id: str, conversation_id: str) -> int:
        gone = [
            key
            for key, d in self._documents.items()
            if key[0] == user_id and d["conversationId"] == conversation_id
        ]
        for key in gone:
            del self._documents[key]
        return len(gone)


class InMemoryOpeningStore(OpeningStore):
    """``OpeningStore`` over the in-memory conversations and ledgers: both locks held for
    the whole change, and both documents stored with no await in between (both or
    neither, as Firestore's batch)."""

    def __init__(
        self, conversations: InMemoryConversationStore, ledgers: InMemoryTaskLedgerStore
    ) -> None:
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
        async with self._conversations.lock, self._ledgers.lock:
            stored = self._conversations.document(user_id, conversation_id)
            current = None if stored is None else Conversation.model_validate(stored)
            ledger, updated, decided = change(await self._ledgers.get(user_id), current)
            if stored is None or current is None:
                document, fields = updated.to_firestore(), None
                check_size(Sizes.of(document).total, reserve)
            else:
                patch = diff(current, updated)
                document, fields = apply(stored, copy.deepcopy(patch)), patch.paths
                check_size(Sizes.of(document).total, reserve, Sizes.of(stored).total)
            # Every check has passed: both are stored, with no await in between (the
            # conversation first: ``put`` may fail, as a commit may, before anything is kept).
            if fields is None or fields:
                self._conversations.put(user_id, conversation_id, document, fields)
            self._ledgers.put(user_id, ledger)
            return updated, decided


class _NoOpenings:
    """The opening store of stores that are neither both in memory nor both on
    Firestore (a test's wrapped stores, given none): every opening fails, as a store
    that is down."""

    async def open(
        self,
        user_id: str,
        conversation_id: str,
        change: Opening[R],
        *,
        new: bool,
        reserve: int = 0,
    ) -> tuple[Conversation, R]:
        raise StoreError("No opening store was given beside these stores.")


def openings_beside(conversations: ConversationStore, ledgers: TaskLedgerStore) -> OpeningStore:
    """The in-memory opening store over these stores, if both are in memory."""
    if isinstance(conversations, InMemoryConversationStore) and isinstance(
        ledgers, InMemoryTaskLedgerStore
    ):
        return InMemoryOpeningStore(conversations, ledgers)
    return _NoOpenings()


def sections_beside(ledger: TaskLedgerStore) -> TaskDocumentStore:
    """The section store a ledger store writes sections into, if it is in memory (an
    empty one otherwise: a test's ledger on Firestore without its sections)."""
    if isinstance(ledger, InMemoryTaskLedgerStore):
        return ledger.sections
    return InMemoryTaskDocumentStore()
