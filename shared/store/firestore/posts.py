"""Writes across users' subtrees on Firestore (``PostStore``): one transaction each."""

from __future__ import annotations

from typing import Any

from google.cloud.firestore import AsyncClient, AsyncTransaction, async_transactional

from shared.store.base import Path, Put, R, Transacted
from shared.store.firestore.common import in_transaction
from shared.store.firestore.conversations import write_fields
from shared.store.patch import diff

# A transaction that loses a race is run again after a random wait
# (``common.in_transaction``).


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
        decided: R = await in_transaction(
            self._client,
            lambda transaction: _transact(transaction, self, work),
            read_only=read_only,
            too_fast="Too many changes at once to save this; please try again.",
        )
        return decided

    async def run(self, transaction: AsyncTransaction, work: Transacted[R]) -> R:
        """One attempt: read through the transaction, then add the writes to it."""
        writes, decided = await work(_TransactionReader(self._client, transaction))
        for write in writes:
            ref = self._client.document(*write.path)
            if isinstance(write, Put):
                transaction.set(ref, dict(write.document))
            elif write.before is None:
                transaction.set(ref, write.after.to_firestore())
            elif patch := diff(write.before, write.after):
                transaction.update(ref, write_fields(patch))
        return decided


@async_transactional
async def _transact(
    transaction: AsyncTransaction, store: FirestorePostStore, work: Transacted[Any]
) -> Any:
    return await store.run(transaction, work)
