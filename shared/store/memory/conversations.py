"""The conversations in memory, written by the same patches as Firestore."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator, Callable
from datetime import datetime
from typing import Any

from shared.errors import ConversationTouched, NotFound, StoreError
from shared.schemas.documents import (
    ArchiveSegment,
    Conversation,
)
from shared.schemas.server import (
    ArchivedFile,
)
from shared.store.accounts import Path
from shared.store.base import (
    ConversationStore,
    Decision,
    R,
    RunProbe,
    RunView,
    Untouched,
    archived_file_path,
    files_named,
)
from shared.store.limits import CLOSING_RESERVE, check_size
from shared.store.listeners import Key, Listeners, Listening
from shared.store.paging import page
from shared.store.patch import Sizes, apply, diff


class InMemoryConversationStore(ConversationStore):
    """Conversations in a dict, one lock per store, written by the same patches as
    Firestore (``shared/store/patch.py``).

    ``writes`` counts every successful write, per conversation, and ``written`` lists
    the field paths each one sent, so tests can check throttling and flat-cost
    streaming writes. ``listeners`` holds the conversations being watched, one listener
    each (as on Firestore). ``segment_reads`` counts the archive segments read; the file
    index (``ArchivedFile`` documents, by path) is kept beside them.
    """

    def __init__(self) -> None:
        self._documents: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self.writes: dict[str, int] = {}
        self.written: dict[str, list[set[str]]] = {}
        self._segments: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._files: dict[tuple[str, ...], dict[str, Any]] = {}
        self.segment_reads = 0
        # The conversations deleted, and when (``DeletedConversation``).
        self.tombstones: dict[tuple[str, str], datetime] = {}
        self._delivering: dict[Key, Callable[[dict[str, Any] | None], None]] = {}
        self.listeners: Listeners[dict[str, Any] | None, RunView | None] = Listeners(
            self._listen, _view
        )

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        document = self._documents.get((user_id, conversation_id))
        return None if document is None else Conversation.model_validate(copy.deepcopy(document))

    @property
    def lock(self) -> asyncio.Lock:
        """Held by each change (a transaction across stores holds it too)."""
        return self._lock

    def document(self, user_id: str, conversation_id: str) -> dict[str, Any] | None:
        """The conversation as stored (a copy), with no lock: for a holder of ``lock``."""
        document = self._documents.get((user_id, conversation_id))
        return None if document is None else copy.deepcopy(document)

    def put(
        self,
        user_id: str,
        conversation_id: str,
        document: dict[str, Any],
        fields: set[str] | None = None,
    ) -> None:
        """Store ``document`` whole, counted as a write (of ``fields``, all of them
        unless given): for a holder of ``lock``."""
        self._store(
            (user_id, conversation_id), document, set(document) if fields is None else fields
        )

    async def create(self, user_id: str, conversation: Conversation) -> None:
        async with self._lock:
            key = (user_id, conversation.id)
            if key in self._documents:
                raise StoreError(f"conversation {conversation.id} already exists")
            document = conversation.to_firestore()
            check_size(Sizes.of(document).total, CLOSING_RESERVE)
            self._store(key, document, set(document))

    async def apply(
        self, user_id: str, conversation_id: str, change: Decision[R], *, reserve: int = 0
    ) -> tuple[Conversation, R]:
        async with self._lock:
            key = (user_id, conversation_id)
            current = await self.get(user_id, conversation_id)
            if current is None:
                raise NotFound("No conversation with this id.")
            updated, decided = change(current)
            patch = diff(current, updated)
            if patch:
                document = apply(self._documents[key], copy.deepcopy(patch))
                before = Sizes.of(self._documents[key]).total if reserve else 0
                check_size(Sizes.of(document).total, reserve, before)
                self._store(key, document, patch.paths)
            return updated, decided

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[str]:
        return page((cid for uid, cid in self._documents if uid == user_id), after, limit)

    def size(self, user_id: str, conversation_id: str) -> int | None:
        document = self._documents.get((user_id, conversation_id))
        return None if document is None else Sizes.of(document).total

    async def archive(self, user_id: str, segment: ArchiveSegment) -> None:
        async with self._lock:
            self._exists(user_id, segment.conversation_id)
            self._index(user_id, segment)
            key = (user_id, segment.conversation_id, segment.segment)
            self._segments[key] = copy.deepcopy(segment.to_firestore())

    async def index(self, user_id: str, segment: ArchiveSegment) -> None:
        async with self._lock:
            self._exists(user_id, segment.conversation_id)
            self._index(user_id, segment)

    def _exists(self, user_id: str, conversation_id: str) -> None:
        """As Firestore's precondition on the conversation (``exists_write``).

        Raises:
            NotFound: there is no such conversation.
        """
        if (user_id, conversation_id) not in self._documents:
            raise NotFound("No conversation with this id.")

    def _index(self, user_id: str, segment: ArchiveSegment) -> None:
        for path in files_named(segment.messages):
            entry = self._files.setdefault(
                archived_file_path(user_id, segment.conversation_id, path),
                ArchivedFile(conversation_id=segment.conversation_id, path=path).to_firestore(),
            )
            if segment.segment not in entry["segments"]:
                entry["segments"] = [*entry["segments"], segment.segment]

    async def delete(
        self,
        user_id: str,
        conversation_id: str,
        now: datetime,
        *,
        untouched_before: datetime | None = None,
    ) -> list[str]:
        async with self._lock:
            key = (user_id, conversation_id)
            document = self._documents.get(key)
            if document is None and key not in self.tombstones:
                raise NotFound("No conversation with this id.")
            if document is not None and _touched(document, untouched_before):
                raise ConversationTouched("The conversation was changed since.")
            self._documents.pop(key, None)
            self.tombstones.setdefault(key, now)
            named: list[str] = []
            if document is not None:
                named = files_named(Conversation.model_validate(document).messages)
                deliver = self._delivering.get((user_id, conversation_id))
                if deliver is not None:
                    deliver(None)
            for number in sorted(k for k in self._segments if k[:2] == key):
                segment = ArchiveSegment.model_validate(self._segments.pop(number))
                named += files_named(segment.messages)
            for path, entry in list(self._files.items()):
                if path[0] == user_id and entry["conversationId"] == conversation_id:
                    del self._files[path]
            return list(dict.fromkeys(named))

    async def untouched(self, before: datetime, limit: int) -> list[Untouched]:
        found = [
            Untouched(uid, cid, Conversation.model_validate(document).updated_at)
            for (uid, cid), document in self._documents.items()
        ]
        old = [u for u in found if u.updated_at < before]
        return sorted(old, key=lambda u: (u.updated_at, u.user_id, u.conversation_id))[:limit]

    async def segments(self, user_id: str, conversation_id: str) -> list[ArchiveSegment]:
        found = sorted(
            (n, document)
            for (uid, cid, n), document in self._segments.items()
            if (uid, cid) == (user_id, conversation_id)
        )
        self.segment_reads += len(found)
        return [ArchiveSegment.model_validate(copy.deepcopy(d)) for _, d in found]

    async def segment(
        self, user_id: str, conversation_id: str, number: int
    ) -> ArchiveSegment | None:
        document = self._segments.get((user_id, conversation_id, number))
        if document is None:
            return None
        self.segment_reads += 1
        return ArchiveSegment.model_validate(copy.deepcopy(document))

    async def archived_file(self, user_id: str, conversation_id: str, path: str) -> list[int]:
        entry = self._files.get(archived_file_path(user_id, conversation_id, path))
        return [] if entry is None else list(entry["segments"])

    async def probe(self, user_id: str, conversation_id: str) -> RunProbe:
        document = self._documents.get((user_id, conversation_id))
        if document is None:
            raise NotFound("No conversation with this id.")
        run = document.get("activeRun") or {}
        return RunProbe(run.get("runId"), run.get("status"), run.get("leaseExpiresAt"))

    def watch(self, user_id: str, conversation_id: str) -> AsyncGenerator[RunView | None, None]:
        return self.listeners.follow((user_id, conversation_id))

    def _listen(self, key: Key, deliver: Callable[[dict[str, Any] | None], None]) -> Listening:
        self._delivering[key] = deliver
        deliver(self._documents.get(key))

        async def stop() -> None:
            if self._delivering.get(key) is deliver:
                del self._delivering[key]

        return Listening(stop)

    def held(self, user_id: str) -> list[Path]:
        """The paths of every document kept for ``user_id`` (as on Firestore)."""
        paths: list[Path] = [_live(uid, cid) for uid, cid in self._documents if uid == user_id]
        paths += [
            (*_live(uid, cid), "archive", f"{n:06d}")
            for uid, cid, n in self._segments
            if uid == user_id
        ]
        return paths + [path for path in self._files if path[0] == user_id]

    def drop(self, path: Path) -> None:
        """Delete the document at ``path`` (nothing if there is none); a conversation's
        watchers see it go."""
        if len(path) == 4 and path[1:3] == ("client", "conversations"):
            key = (path[0], path[3])
            if self._documents.pop(key, None) is not None:
                deliver = self._delivering.get(key)
                if deliver is not None:
                    deliver(None)
        elif len(path) == 6 and path[1:3] == ("client", "conversations") and path[4] == "archive":
            self._segments.pop((path[0], path[3], int(path[5])), None)
        else:
            self._files.pop(path, None)

    def _store(self, key: tuple[str, str], document: dict[str, Any], fields: set[str]) -> None:
        # Stored documents are never changed in place (``apply`` copies what it changes),
        # so listeners may keep them.
        self._documents[key] = copy.deepcopy(document)
        self.writes[key[1]] = self.writes.get(key[1], 0) + 1
        self.written.setdefault(key[1], []).append(fields)
        deliver = self._delivering.get(key)
        if deliver is not None:
            deliver(self._documents[key])


def _touched(document: dict[str, Any], since: datetime | None) -> bool:
    """Whether the stored ``document`` was changed at or after ``since`` (if given)."""
    return since is not None and Conversation.model_validate(document).updated_at >= since


def _live(user_id: str, conversation_id: str) -> Path:
    return (user_id, "client", "conversations", conversation_id)


def _view(document: dict[str, Any] | None) -> RunView | None:
    if document is None:
        return None
    return RunView.stored(
        document["id"], document.get("activeRun"), lambda: document.get("messages")
    )
