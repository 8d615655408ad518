"""The task ledgers on Firestore."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore import AsyncClient

from shared.errors import StoreError
from shared.schemas.server import TaskLedger
from shared.store.base import LedgerDecision, R, TaskLedgerStore
from shared.store.firestore.common import MAX_ATTEMPTS, back_off, changed_fields, unavailable

# Task ledgers whose latest version this process remembers.
_LEDGERS_KEPT = 4096


class FirestoreTaskLedgerStore(TaskLedgerStore):
    """Task ledgers at ``/{userId}/server``, changed by compare-and-set like conversations.

    The version each write produces is remembered (a few thousand small documents at
    most), so taking a run slot on a send costs one RPC, not a read and a write. The
    remembered copy is a hint: a change that writes is checked by its precondition, and
    one that writes nothing is judged again on a fresh read before it is believed.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._known: OrderedDict[str, tuple[dict[str, Any], datetime]] = OrderedDict()

    def _ref(self, user_id: str) -> Any:
        return self._client.collection(user_id).document("server")

    def _remember(self, user_id: str, document: dict[str, Any], update_time: datetime) -> None:
        self._known[user_id] = (document, update_time)
        self._known.move_to_end(user_id)
        while len(self._known) > _LEDGERS_KEPT:
            self._known.popitem(last=False)

    async def get(self, user_id: str) -> TaskLedger:
        with unavailable("Firestore read"):
            snapshot = await self._ref(user_id).get()
        return TaskLedger.model_validate(snapshot.to_dict()) if snapshot.exists else TaskLedger()

    async def apply(self, user_id: str, change: LedgerDecision[R]) -> tuple[TaskLedger, R]:
        for attempt in range(MAX_ATTEMPTS):
            if attempt > 1:
                await back_off(attempt)
            with unavailable("Firestore write"):
                try:
                    done = await self._attempt(user_id, change)
                except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound):
                    continue  # someone else wrote in between: read again and redo
            if done is not None:
                return done
        raise StoreError("The task list is changing too fast to save; please try again.")

    async def _attempt(
        self, user_id: str, change: LedgerDecision[R]
    ) -> tuple[TaskLedger, R] | None:
        """One compare-and-set: the ledger written and what ``change`` decided, or
        ``None`` when it must be judged again on a fresh read."""
        ref = self._ref(user_id)
        known = self._known.pop(user_id, None)
        remembered = known is not None
        if known is None:
            snapshot = await ref.get()
            if not snapshot.exists:
                updated, decided = change(TaskLedger())
                document = updated.to_firestore()
                result = await ref.create(document)
                self._remember(user_id, document, result.update_time)
                return updated, decided
            known = (snapshot.to_dict(), snapshot.update_time)
        before, update_time = known
        try:
            updated, decided = change(TaskLedger.model_validate(before))
        except Exception:
            if remembered:
                return None  # judged on a remembered copy: read afresh and judge again
            raise
        document = updated.to_firestore()
        fields = changed_fields(before, document)
        if not fields and remembered:
            # A change that writes nothing (a claim found ``stale``, a finish of a
            # superseded attempt) decided on a remembered copy: another process may
            # have granted the attempt since. Its verdict drops work, so it stands only
            # once a fresh read agrees.
            return None
        if fields:
            option = self._client.write_option(last_update_time=update_time)
            update_time = (await ref.update(fields, option=option)).update_time
        self._remember(user_id, document, update_time)
        return updated, decided
