"""The record of spent App Check tokens on Firestore (``shared/appcheck/replays.py``
says why it exists): one document per token, created with the precondition that it
does not exist yet, so the first use wins in every process."""

from __future__ import annotations

import hashlib
from datetime import datetime

from google.api_core import exceptions as gexc
from google.cloud.firestore import AsyncClient

from shared.store.firestore.common import unavailable

# Its records' TTL is terraform/firestore.tf's (on ``expiresAt``).
COLLECTION = "appCheckTokens"


class FirestoreSpentTokens:
    """``SpentTokens`` on Firestore: ``appCheckTokens/{digest of the token id}``."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def consume(self, token_id: str, expires_at: datetime) -> bool:
        # A digest: a token id is the app's to choose, and a document id has rules of its own.
        name = hashlib.sha256(token_id.encode()).hexdigest()
        ref = self._client.collection(COLLECTION).document(name)
        with unavailable("Firestore write of a spent App Check token"):
            try:
                await ref.create({"expiresAt": expires_at})
            except gexc.AlreadyExists:
                return False
        return True
