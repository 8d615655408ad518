"""Families on Firestore: every change is one Firestore transaction."""

from __future__ import annotations

from typing import Any

from google.cloud.firestore import AsyncClient, AsyncTransaction, async_transactional

from shared.ids import reserved
from shared.schemas.server import Family, Invite, Membership
from shared.store.base import FamilyChange, Household, R, Reads
from shared.store.firestore.common import in_transaction
from shared.store.households import (
    Path,
    family_path,
    invite_path,
    membership_path,
    plan,
    token_path,
)

# A transaction that loses a race is run again after a random wait
# (``common.in_transaction``, which says why and what it cost).


class FirestoreFamilyStore:
    """``FamilyStore`` on Firestore: ``apply`` reads what it is asked for in a
    transaction, runs the pure change and writes ``households.plan``'s documents in
    the same transaction, so a join's check of the invite, its use and every mirror
    land together or not at all."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def _ref(self, path: Path) -> Any:
        return self._client.document(*path)

    async def read(self, reads: Reads) -> Household:
        household, _ = await self._run(reads, _unchanged, read_only=True)
        return household

    async def apply(self, reads: Reads, change: FamilyChange[R]) -> tuple[Household, R]:
        return await self._run(reads, change, read_only=False)

    async def _run(
        self, reads: Reads, change: FamilyChange[R], *, read_only: bool
    ) -> tuple[Household, R]:
        """The transaction, retried while competing ones abort it: during its reads
        (which the client library does not retry) or at each of its commits."""
        done: tuple[Household, R] = await in_transaction(
            self._client,
            lambda transaction: _transact(transaction, self, reads, change),
            read_only=read_only,
            too_fast="Your family is changing too fast to save; please try again.",
        )
        return done

    async def household(self, transaction: AsyncTransaction, reads: Reads) -> Household:
        """What ``reads`` names, read in ``transaction``. An id Firestore reserves names
        nothing (as in the other stores): it is never made a path, which Firestore refuses."""
        family_id, invite_id = reads.family_id, reads.invite_id
        if reads.token_hash is not None:
            token = await self._get(transaction, token_path(reads.token_hash))
            family_id = token["familyId"] if token else None
            invite_id = token["inviteId"] if token else None
        memberships = {
            uid: Membership.model_validate(await self._get(transaction, membership_path(uid)) or {})
            for uid in reads.users
        }
        if family_id is None or reserved(family_id):
            return Household(memberships=memberships)
        stored = await self._get(transaction, family_path(family_id))
        family = None if stored is None else Family.model_validate(stored)
        wanted = [*(family.invite_ids if family and reads.all_invites else []), invite_id]
        refs = [
            self._ref(invite_path(family_id, i))
            for i in dict.fromkeys(wanted)
            if i and not reserved(i)
        ]
        invites: dict[str, Invite] = {}
        if refs:
            # The client's own get_all: AsyncTransaction.get_all awaits it, which fails
            # (google-cloud-firestore 2.34.1: "async_generator can't be used in 'await'").
            async for snapshot in self._client.get_all(refs, transaction=transaction):
                if snapshot.exists:
                    invites[snapshot.id] = Invite.model_validate(snapshot.to_dict())
        return Household(family=family, invites=invites, memberships=memberships)

    async def _get(self, transaction: AsyncTransaction, path: Path) -> dict[str, Any] | None:
        if any(reserved(part) for part in path):
            return None
        snapshot = await self._ref(path).get(transaction=transaction)
        document: dict[str, Any] | None = snapshot.to_dict() if snapshot.exists else None
        return document

    def write(self, transaction: AsyncTransaction, before: Household, after: Household) -> None:
        """``households.plan``'s writes, added to ``transaction``."""
        for write in plan(before, after):
            if write.document is None:
                transaction.delete(self._ref(write.path))
            else:
                transaction.set(self._ref(write.path), write.document)


def _unchanged(household: Household) -> tuple[Household, None]:
    return household, None


@async_transactional
async def _transact(
    transaction: AsyncTransaction,
    store: FirestoreFamilyStore,
    reads: Reads,
    change: FamilyChange[Any],
) -> tuple[Household, Any]:
    """Read, decide, write: one attempt of one transaction (the client library runs it
    again, reading afresh, when its commit is aborted)."""
    before = await store.household(transaction, reads)
    after, decided = change(before)
    store.write(transaction, before, after)
    return after, decided
