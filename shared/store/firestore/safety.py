"""Parents' safety mirrors on Firestore: every parent's written in one transaction."""

from __future__ import annotations

from collections.abc import Sequence

from google.cloud.firestore import AsyncClient, AsyncTransaction, async_transactional

from shared.schemas.documents import SafetyFlag, SafetyMirror
from shared.store.firestore.common import in_transaction, unavailable
from shared.store.safety import safety_path, with_flag

_TOO_FAST = "Flags were raised too fast to record; the next one will be."


class FirestoreSafetyStore:
    """``SafetyStore`` on Firestore: a flag is added to each parent's mirror in one
    transaction (read, then write), so two flags at once both stay."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def add(self, parent_ids: Sequence[str], flag: SafetyFlag) -> None:
        refs = [self._client.document(*safety_path(p)) for p in dict.fromkeys(parent_ids)]
        if not refs:
            return

        @async_transactional
        async def attempt(transaction: AsyncTransaction) -> None:
            mirrors: dict[str, SafetyMirror] = {}
            for ref in refs:
                snapshot = await ref.get(transaction=transaction)
                data = snapshot.to_dict() if snapshot.exists else None
                mirrors[ref.path] = SafetyMirror.model_validate(data or {})
            for ref in refs:
                transaction.set(ref, with_flag(mirrors[ref.path], flag, flag.at).to_firestore())

        await in_transaction(self._client, attempt, read_only=False, too_fast=_TOO_FAST)

    async def get(self, user_id: str) -> SafetyMirror:
        with unavailable("Firestore read of a safety mirror"):
            snapshot = await self._client.document(*safety_path(user_id)).get()
        return SafetyMirror.model_validate((snapshot.to_dict() if snapshot.exists else None) or {})
