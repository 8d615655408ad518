"""Deletion records, and the erasure of an account's documents, over the in-memory stores.

Each in-memory store keeps its documents in its own shape; each one that holds a user's
documents says which (``held``: their paths, as on Firestore) and deletes one by path
(``drop``), so a page lists and deletes across all of them as Firestore's query over
``/{uid}/**`` does across collections.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable, MutableMapping, Sequence
from typing import Any, Protocol

from shared.errors import StoreError
from shared.schemas.deletions import Deletion, deletion_id_of
from shared.store.accounts import Path, deletion_path


class Holder(Protocol):
    """An in-memory store that keeps users' documents."""

    def held(self, user_id: str) -> list[Path]:
        """The paths of every document it keeps under ``/{user_id}``."""
        ...

    def drop(self, path: Path) -> None:
        """Delete the document at ``path`` (nothing if it keeps none there)."""
        ...


class ByPath:
    """A store's documents kept by path (families', settings', provenance's)."""

    def __init__(self, documents: MutableMapping[Path, Any]) -> None:
        self._documents = documents

    def held(self, user_id: str) -> list[Path]:
        return [path for path in self._documents if path[0] == user_id]

    def drop(self, path: Path) -> None:
        self._documents.pop(path, None)


class InMemoryAccountStore:
    """``AccountStore`` over ``holders`` (the stores a user's documents live in); the
    records in ``documents``, by path.

    ``writes`` counts every document written or deleted by a commit; ``commits`` the
    commits; with ``fail_after`` set, the commit that would go past that many writes
    fails (nothing of it is kept), as a process killed half way would leave it.
    """

    def __init__(self, holders: Iterable[Holder] = ()) -> None:
        self.holders = list(holders)
        self.documents: dict[Path, dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self.writes = 0
        self.commits = 0
        self.fail_after: int | None = None

    async def deletion(self, deletion_id: str) -> Deletion | None:
        stored = self.documents.get(deletion_path(deletion_id))
        return None if stored is None else Deletion.model_validate(copy.deepcopy(stored))

    async def begin(self, deletion: Deletion) -> Deletion:
        async with self._lock:
            path = deletion_path(deletion.id)
            if path not in self.documents:
                self._count(1)
                self.documents[path] = deletion.to_firestore()
            return Deletion.model_validate(copy.deepcopy(self.documents[path]))

    async def erased(self, user_ids: Sequence[str]) -> frozenset[str]:
        return frozenset(
            uid for uid in user_ids if deletion_path(deletion_id_of(uid)) in self.documents
        )

    async def listed(self, user_id: str, limit: int) -> list[Path]:
        held = sorted({path for holder in self.holders for path in holder.held(user_id)})
        return held[:limit]

    async def commit(self, read: Deletion, after: Deletion, deleted: Sequence[Path]) -> bool:
        async with self._lock:
            path = deletion_path(read.id)
            stored = self.documents.get(path)
            if stored is None or Deletion.model_validate(stored).version != read.version:
                return False
            self._count(len(deleted) + 1)
            for gone in deleted:
                for holder in self.holders:
                    holder.drop(gone)
            self.documents[path] = after.to_firestore()
            self.commits += 1
            return True

    def _count(self, writes: int) -> None:
        if self.fail_after is not None and self.writes + writes > self.fail_after:
            raise StoreError("The store failed (test: its writes ran out).")
        self.writes += writes


def accounts_beside(stores: Iterable[object]) -> InMemoryAccountStore:
    """The in-memory account store over ``stores``: each that says what it holds
    (``Holder``), and each that keeps its documents by path (``documents``); others (a
    store on Firestore in a test) hold nothing it can see."""
    holders: list[Holder] = []
    for store in stores:
        if hasattr(store, "held") and hasattr(store, "drop"):
            holders.append(store)
        elif isinstance(documents := getattr(store, "documents", None), dict):
            holders.append(ByPath(documents))
    return InMemoryAccountStore(holders)
