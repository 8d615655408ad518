"""Families, and writes across users' subtrees (a family message's copies), in memory."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from shared.errors import StoreError
from shared.schemas.server import (
    Family,
    Invite,
    Membership,
)
from shared.store.base import (
    Amend,
    ConversationStore,
    FamilyChange,
    Household,
    PostStore,
    Put,
    R,
    Reads,
    Transacted,
)
from shared.store.households import (
    Path,
    family_path,
    invite_path,
    membership_path,
    plan,
    token_path,
)
from shared.store.memory.conversations import InMemoryConversationStore
from shared.store.patch import apply, diff


class InMemoryFamilyStore:
    """Families and what hangs on them, as documents by path (``documents``, which
    tests read as they would Firestore); one lock makes each change a transaction."""

    def __init__(self) -> None:
        self.documents: dict[Path, dict[str, Any]] = {}
        self._lock = asyncio.Lock()

    @property
    def lock(self) -> asyncio.Lock:
        """Held by each change (a transaction across stores holds it too)."""
        return self._lock

    async def read(self, reads: Reads) -> Household:
        async with self._lock:
            return self._read(reads)

    async def apply(self, reads: Reads, change: FamilyChange[R]) -> tuple[Household, R]:
        async with self._lock:
            before = self._read(reads)
            after, decided = change(before)
            for write in plan(before, after):
                if write.document is None:
                    self.documents.pop(write.path, None)
                else:
                    self.documents[write.path] = copy.deepcopy(write.document)
            return after, decided

    def _get(self, path: Path) -> dict[str, Any] | None:
        document = self.documents.get(path)
        return None if document is None else copy.deepcopy(document)

    def _read(self, reads: Reads) -> Household:
        family_id, invite_id = reads.family_id, reads.invite_id
        if reads.token_hash is not None:
            token = self._get(token_path(reads.token_hash))
            family_id, invite_id = (token["familyId"], token["inviteId"]) if token else (None, None)
        memberships = {
            uid: Membership.model_validate(self._get(membership_path(uid)) or {})
            for uid in reads.users
        }
        if family_id is None:
            return Household(memberships=memberships)
        stored = self._get(family_path(family_id))
        family = None if stored is None else Family.model_validate(stored)
        wanted = [*(family.invite_ids if family and reads.all_invites else []), invite_id]
        invites = {
            iid: Invite.model_validate(found)
            for iid in wanted
            if iid is not None and (found := self._get(invite_path(family_id, iid)))
        }
        return Household(family=family, invites=invites, memberships=memberships)


class InMemoryPostStore:
    """``PostStore`` over the in-memory conversations and families (and any other
    server-only document, kept by path beside the families'): both locks held for the
    whole transaction, so its reads and writes are atomic as on Firestore."""

    def __init__(
        self, conversations: InMemoryConversationStore, families: InMemoryFamilyStore
    ) -> None:
        self._conversations = conversations
        self._families = families

    def _conversation_key(self, path: Path) -> tuple[str, str] | None:
        if len(path) == 4 and path[1:3] == ("client", "conversations"):
            return path[0], path[3]
        return None

    def _get(self, path: Path) -> dict[str, Any] | None:
        key = self._conversation_key(path)
        if key is not None:
            return self._conversations.document(*key)
        document = self._families.documents.get(path)
        return None if document is None else copy.deepcopy(document)

    async def get(self, path: Path) -> dict[str, Any] | None:
        return self._get(path)

    async def transact(self, work: Transacted[R], *, read_only: bool = False) -> R:
        async with self._conversations.lock, self._families.lock:
            writes, decided = await work(self)
            if read_only and writes:
                raise ValueError("a read-only transaction cannot write")
            for write in writes:
                self._write(write)
            return decided

    def _write(self, write: Put | Amend) -> None:
        fields: set[str] | None = None
        if isinstance(write, Put):
            document = copy.deepcopy(dict(write.document))
        elif write.before is None:
            document = write.after.to_firestore()
        else:
            before = self._get(write.path)
            if before is None:
                raise StoreError(f"no document at {'/'.join(write.path)} to change")
            patch = diff(write.before, write.after)
            if not patch:
                return
            document, fields = apply(before, copy.deepcopy(patch)), patch.paths
        key = self._conversation_key(write.path)
        if key is not None:
            self._conversations.put(*key, document, fields)
        else:
            self._families.documents[write.path] = document


class _NoPosts:
    """The post store of stores that are neither both in memory nor both on Firestore
    (a test's wrapped fakes): every transaction fails, as a store that is down."""

    async def transact(self, work: Transacted[R], *, read_only: bool = False) -> R:
        raise StoreError("No post store was given beside these stores.")


def posts_beside(conversations: ConversationStore, families: object) -> PostStore:
    """The in-memory post store over these stores, if both are in memory."""
    if isinstance(conversations, InMemoryConversationStore) and isinstance(
        families, InMemoryFamilyStore
    ):
        return InMemoryPostStore(conversations, families)
    return _NoPosts()
