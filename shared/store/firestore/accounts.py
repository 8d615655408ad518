"""Deletion records, and the pages of an erasure, on Firestore.

A page is listed by one query over ``/{uid}/**`` (a collection-group scan under the
user's own collection, ``all_descendants``) that reads only the documents' names, and
deleted in one transaction with the record moved on: the transaction reads the record,
so a second delivery's commit of the same page is aborted and, read again, finds the
record moved on and writes nothing (``AccountStore.commit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.cloud.firestore import AsyncClient, AsyncTransaction, async_transactional
from google.cloud.firestore_v1.field_path import FieldPath

from shared.ids import reserved
from shared.schemas.deletions import Deletion, deletion_id_of
from shared.store.accounts import DELETIONS, Path
from shared.store.firestore.common import in_transaction, unavailable

_TOO_FAST = "The account's erasure is changing too fast to save; it will try again."


class FirestoreAccountStore:
    """``AccountStore`` on Firestore (``/deletions`` and each user's collection)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _ref(self, deletion_id: str) -> Any:
        return self._client.collection(DELETIONS).document(deletion_id)

    async def deletion(self, deletion_id: str) -> Deletion | None:
        if reserved(deletion_id):
            return None
        with unavailable("Firestore read of a deletion"):
            snapshot = await self._ref(deletion_id).get()
        return Deletion.model_validate(snapshot.to_dict()) if snapshot.exists else None

    async def begin(self, deletion: Deletion) -> Deletion:
        @async_transactional
        async def attempt(transaction: AsyncTransaction) -> Deletion:
            ref = self._ref(deletion.id)
            snapshot = await ref.get(transaction=transaction)
            if snapshot.exists:
                return Deletion.model_validate(snapshot.to_dict())
            transaction.create(ref, deletion.to_firestore())
            return deletion

        begun: Deletion = await in_transaction(
            self._client, attempt, read_only=False, too_fast=_TOO_FAST
        )
        return begun

    async def erased(self, user_ids: Sequence[str]) -> frozenset[str]:
        wanted = {deletion_id_of(uid): uid for uid in dict.fromkeys(user_ids)}
        if not wanted:
            return frozenset()
        refs = [self._ref(deletion_id) for deletion_id in wanted]
        found: set[str] = set()
        with unavailable("Firestore read of deletions"):
            async for snapshot in self._client.get_all(refs, field_paths=["uidHash"]):
                if snapshot.exists:
                    found.add(wanted[snapshot.id])
        return frozenset(found)

    async def listed(self, user_id: str, limit: int) -> list[Path]:
        # ``recursive`` orders by the documents' names already (its range over them is
        # what keeps the scan inside the user's collection).
        query = (
            self._client.collection(user_id)
            .recursive()
            .select([FieldPath.document_id()])
            .limit(limit)
        )
        with unavailable("Firestore listing of an account's documents"):
            snapshots = await query.get()
        return [tuple(snapshot.reference.path.split("/")) for snapshot in snapshots]

    async def commit(self, read: Deletion, after: Deletion, deleted: Sequence[Path]) -> bool:
        @async_transactional
        async def attempt(transaction: AsyncTransaction) -> bool:
            ref = self._ref(read.id)
            snapshot = await ref.get(transaction=transaction)
            if not snapshot.exists or Deletion.model_validate(snapshot.to_dict()).version != (
                read.version
            ):
                return False
            for path in deleted:
                transaction.delete(self._client.document(*path))
            transaction.set(ref, after.to_firestore())
            return True

        landed: bool = await in_transaction(
            self._client, attempt, read_only=False, too_fast=_TOO_FAST
        )
        return landed
