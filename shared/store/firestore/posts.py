"""Writes across users' subtrees on Firestore (``PostStore``): one transaction each."""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore import ArrayUnion, AsyncClient, AsyncTransaction, async_transactional

from shared.errors import StoreError
from shared.store.base import Path, Put, R, Transacted
from shared.store.firestore.common import MAX_ATTEMPTS, back_off, unavailable

# As the family store's (``families.py``): a transaction that loses a race is run again
# here after a random wait that doubles from 0.1 s up to the emulator's lock timeout,
# never at once by the client library.
_BACK_OFF_BASE, _BACK_OFF_CAP = 0.05, 2.0


class _TransactionReader:
    def __init__(self, client: AsyncClient, transaction: AsyncTransaction) -> None:
        self._client = client
        self._transaction = transaction

    async def get(self, path: Path) -> dict[str, Any] | None:
        snapshot = await self._client.document(*path).get(transaction=self._transaction)
        document: dict[str, Any] | None = snapshot.to_dict() if snapshot.exists else None
        return document


class FirestorePostStore:
    """``PostStore`` on Firestore: the work's reads are the transaction's (each document
    it read is locked until the commit, or the commit fails if it changed), and its
    writes are committed together."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def transact(self, work: Transacted[R], *, read_only: bool = False) -> R:
        for attempt in range(MAX_ATTEMPTS):
            if attempt > 0:
                await back_off(attempt, _BACK_OFF_BASE, _BACK_OFF_CAP)
            transaction = self._client.transaction(max_attempts=1, read_only=read_only)
            with unavailable("Firestore transaction"):
                try:
                    decided: R = await _transact(transaction, self, work)
                except gexc.Aborted:
                    continue
                except ValueError as exc:
                    if not isinstance(exc.__cause__, gexc.Aborted):
                        raise
                    continue  # its commit was aborted (the client library tries once)
                return decided
        raise StoreError("Too many changes at once to save this; please try again.")

    async def run(self, transaction: AsyncTransaction, work: Transacted[R]) -> R:
        """One attempt: read through the transaction, then add the writes to it."""
        writes, decided = await work(_TransactionReader(self._client, transaction))
        for write in writes:
            ref = self._client.document(*write.path)
            if isinstance(write, Put):
                transaction.set(ref, dict(write.document))
            else:
                fields: dict[str, Any] = dict(write.fields)
                fields.update({k: ArrayUnion(list(v)) for k, v in write.append.items()})
                transaction.update(ref, fields)
        return decided


@async_transactional
async def _transact(
    transaction: AsyncTransaction, store: FirestorePostStore, work: Transacted[Any]
) -> Any:
    return await store.run(transaction, work)
