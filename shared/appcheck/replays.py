"""Limited-use App Check tokens spent, so that each works once (replay protection).

The calls that cost money (a new run, speech, a voice session) ``consume`` their
token: the first ``consume`` of a token id wins, every later one, in any process, is
told it was spent. A remembered set would let a token through once per instance, so
the record is a document created with a precondition (``create``: it must not exist),
and a token's record may be dropped once the token has expired (Firestore's TTL on
``expiresAt``: terraform/firestore.tf), since an expired token is refused anyway.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class SpentTokens(Protocol):
    """The record of App Check tokens already used for a costly call."""

    async def consume(self, token_id: str, expires_at: datetime) -> bool:
        """Record ``token_id`` as spent; whether this was its first use.

        Raises:
            StoreError: the record could not be written (the call is then refused).
        """
        ...


class InMemorySpentTokens:
    """``SpentTokens`` in one process's memory (tests, and the contract's fake)."""

    def __init__(self) -> None:
        self.spent: dict[str, datetime] = {}

    async def consume(self, token_id: str, expires_at: datetime) -> bool:
        if token_id in self.spent:
            return False
        self.spent[token_id] = expires_at
        return True
