"""The task ledgers on Firestore."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.cloud.firestore import AsyncClient

from shared.ids import reserved
from shared.schemas.documents import TaskDocument
from shared.schemas.server import TaskLedger
from shared.store.base import LedgerAndSections, R, SectionChange, TaskLedgerStore
from shared.store.firestore.cas import compare_and_set, confirmed, judged
from shared.store.firestore.common import changed_fields, unavailable
from shared.store.firestore.raw import Batch, Writes
from shared.store.firestore.tasks import sections_of

# Task ledgers whose latest version this process remembers.
_LEDGERS_KEPT = 4096


class FirestoreTaskLedgerStore(TaskLedgerStore):
    """Task ledgers at ``/{userId}/server``, changed by compare-and-set like conversations,
    with the task sections a change names (``/{userId}/client/tasks/{taskId}``) in the
    same batch.

    The version each write produces is remembered (a few thousand small documents at
    most), so taking a run slot on a send costs one RPC, not a read and a write. The
    remembered copy is a hint: a change that writes is checked by its precondition, and
    one that writes nothing is judged again on a fresh read before it is believed.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._writes = Writes(client)
        self._known: OrderedDict[str, tuple[dict[str, Any], datetime]] = OrderedDict()

    def _ref(self, user_id: str) -> Any:
        return self._client.collection(user_id).document("server")

    def ref(self, user_id: str) -> Any:
        """The ledger's document reference (for a write across documents)."""
        return self._ref(user_id)

    def recall(self, user_id: str) -> tuple[dict[str, Any], datetime] | None:
        """The ledger as this process last wrote or read it, and its ``update_time``,
        forgotten until ``remember``ed again (a guess: a write over it is checked by its
        precondition)."""
        return self._known.pop(user_id, None)

    def remember(self, user_id: str, document: dict[str, Any], update_time: datetime) -> None:
        """Keep ``document`` (stored at ``update_time``) as the ledger's latest version."""
        self._known[user_id] = (document, update_time)
        self._known.move_to_end(user_id)
        while len(self._known) > _LEDGERS_KEPT:
            self._known.popitem(last=False)

    async def get(self, user_id: str) -> TaskLedger:
        with unavailable("Firestore read"):
            snapshot = await self._ref(user_id).get()
        return TaskLedger.model_validate(snapshot.to_dict()) if snapshot.exists else TaskLedger()

    async def apply_with_sections(
        self, user_id: str, change: LedgerAndSections[R]
    ) -> tuple[TaskLedger, R]:
        return await compare_and_set(
            lambda fresh: self._attempt(user_id, change),
            too_fast="The task list is changing too fast to save; please try again.",
        )

    async def _attempt(self, user_id: str, change: LedgerAndSections[R]) -> tuple[TaskLedger, R]:
        """One compare-and-set (``cas.compare_and_set``) of the ledger and the sections
        ``change`` names, in one batch: what was written and what ``change`` decided."""
        ref = self._ref(user_id)
        known = self.recall(user_id)
        remembered = known is not None
        if known is None:
            snapshot = await ref.get()
            before = snapshot.to_dict() if snapshot.exists else None
            update_time = snapshot.update_time if snapshot.exists else None
        else:
            before, update_time = known
        updated, decided, named = judged(
            lambda: change(TaskLedger() if before is None else TaskLedger.model_validate(before)),
            remembered=remembered,
        )
        document = updated.to_firestore()
        fields = document if before is None else changed_fields(before, document)
        # A change that writes nothing (a claim found ``stale``, a finish of a superseded
        # attempt) decided on a remembered copy: another process may have granted the
        # attempt since. Its verdict drops work, so it stands only once a fresh read agrees.
        confirmed(bool(fields), remembered=remembered)
        # One batch, one RPC: each write carries its own precondition, and if one fails
        # none lands (a section never ends unlike its record). The ledger goes first.
        batch = self._writes.batch()
        if before is None:
            batch.create(ref, document)
        elif fields:
            batch.update(ref, fields, update_time)
        sections = await self._sections(batch, user_id, named)
        if before is None or fields or sections:
            results = await batch.commit()
            if before is None or fields:
                update_time = results[0]
        if update_time is not None:  # (always, by now: read, or just written)
            self.remember(user_id, document, update_time)
        return updated, decided

    async def _sections(
        self, batch: Batch, user_id: str, named: Mapping[str, SectionChange]
    ) -> int:
        """Add to ``batch`` the sections ``named`` changes (each read afresh, in one
        call, and written on the condition that it is still that version); how many."""
        refs = [sections_of(self._client, user_id).document(t) for t in named if not reserved(t)]
        if not refs:
            return 0
        count = 0
        async for snapshot in self._client.get_all(refs):
            stored = snapshot.to_dict() if snapshot.exists else None
            current = None if stored is None else TaskDocument.model_validate(stored)
            updated = named[snapshot.id](current)
            if updated is None or updated == current:
                continue
            section = updated.to_firestore()
            if stored is None:
                batch.create(snapshot.reference, section)
            else:
                batch.update(
                    snapshot.reference, changed_fields(stored, section), snapshot.update_time
                )
            count += 1
        return count
