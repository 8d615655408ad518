"""The record of family text given to each user's model, on Firestore
(``shared/egress/provenance.py`` says why it exists)."""

from __future__ import annotations

from collections.abc import Sequence

from google.cloud.firestore import ArrayUnion, AsyncClient
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.egress.provenance import Given, given_path, index_path
from shared.schemas.server import GivenAuthors, GivenText
from shared.store.firestore.common import unavailable

# Firestore's ``in`` filter takes at most this many values (a family holds fewer).
_IN_LIMIT = 30


class FirestoreProvenanceStore:
    """``ProvenanceStore`` on Firestore: the index and the messages written in one batch."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def record(self, user_id: str, given: Sequence[Given]) -> None:
        if not given:
            return
        batch = self._client.batch()
        for one in given:
            batch.set(self._client.document(*given_path(user_id, one.message_id)), one.document())
        authors = sorted({g.author_id for g in given})
        batch.set(
            self._client.document(*index_path(user_id)),
            {"authors": ArrayUnion(authors)},
            merge=True,
        )
        with unavailable("Firestore write of provenance"):
            await batch.commit()

    async def authors(self, user_id: str) -> frozenset[str]:
        with unavailable("Firestore read of provenance"):
            snapshot = await self._client.document(*index_path(user_id)).get()
        if not snapshot.exists:
            return frozenset()
        return frozenset(GivenAuthors.model_validate(snapshot.to_dict() or {}).authors)

    async def texts(self, user_id: str, author_ids: Sequence[str]) -> list[str]:
        return [g.text for g in await self.given(user_id, author_ids)]

    async def given(self, user_id: str, author_ids: Sequence[str]) -> list[Given]:
        wanted = sorted(set(author_ids))
        collection = self._client.collection(*index_path(user_id), "given")
        found: list[GivenText] = []
        for start in range(0, len(wanted), _IN_LIMIT):
            query = collection.where(
                filter=FieldFilter("authorId", "in", wanted[start : start + _IN_LIMIT])
            )
            with unavailable("Firestore read of provenance"):
                found += [GivenText.model_validate(s.to_dict() or {}) async for s in query.stream()]
        return [Given(g.message_id, g.author_id, g.text, g.given_at) for g in found]
