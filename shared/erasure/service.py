"""``Erasures``: asking for an account's erasure (DESIGN §15), the person's own or, by a
parent, a dependent's. The request refuses at once what the erasure could not finish
(the last parent of a family with others: ``last_parent``, nothing written), then
writes the deletion record, which is also the tombstone (``erased``), and hands the
work to a task (``steps.Eraser``), which goes on in pages from the record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from shared.clock import Clock
from shared.errors import FamilyNotFound, LastParent, MemberNotFound
from shared.families.membership import NO_MEMBER, NOT_YOURS
from shared.queue.base import QueuedTask, TaskQueue
from shared.queue.naming import erase_name
from shared.schemas.deletions import Deletion, deletion_id_of, uid_hash
from shared.schemas.server import Family
from shared.schemas.tasks import EraseTask
from shared.store.accounts import AccountStore
from shared.store.base import FamilyStore, Reads

LAST_PARENT = (
    "You are the only parent of a family that has other members, so your account cannot "
    "be deleted yet. Make another member a parent, or remove the other members, first."
)


def step_task(user_id: str, record: Deletion, due: datetime | None = None) -> QueuedTask:
    """The task that takes ``record`` on from its version; ``due``: not before then,
    under a name of its own (the step's first task was used)."""
    payload = EraseTask(user_id=user_id, deletion_id=record.id, step=record.version)
    name = erase_name(record.id, record.version)
    if due is None:
        return QueuedTask(name, payload.to_bytes())
    return QueuedTask(f"{name}-w{int(due.timestamp())}", payload.to_bytes(), due)


@dataclass(frozen=True, slots=True)
class Requested:
    """An erasure asked for: its record (``deletionId``)."""

    deletion: Deletion


class Erasures:
    """Requests for erasures, and the tombstones they leave; one per process."""

    def __init__(
        self, accounts: AccountStore, families: FamilyStore, queue: TaskQueue, clock: Clock
    ) -> None:
        self._accounts = accounts
        self._families = families
        self._queue = queue
        self._clock = clock

    async def erase(self, user_id: str, by: Literal["self", "parent"] = "self") -> Requested:
        """Begin erasing ``user_id``'s account (again: the erasure already begun, its
        task handed on once more should its chain have been lost).

        Raises:
            LastParent: the user is the last parent of a family with other members
                (nothing is written).
            StoreError, QueueUnavailable: the record or its task could not be written
                (asking again is safe).
        """
        record = await self._accounts.deletion(deletion_id_of(user_id))
        if record is None:
            family = await self._family_of(user_id)
            if family is not None and _last_parent(family, user_id):
                raise LastParent(LAST_PARENT)
            record = await self._accounts.begin(
                Deletion(
                    id=deletion_id_of(user_id),
                    uid_hash=uid_hash(user_id),
                    requested_at=self._clock.now(),
                    requested_by=by,
                )
            )
        if record.step != "finished":
            await self._queue.enqueue(step_task(user_id, record))
        return Requested(record)

    async def erase_dependent(self, caller: str, family_id: str, member_id: str) -> Requested:
        """A parent erases a dependent's account (``erase``).

        Raises:
            FamilyNotFound: not the caller's family, or the caller is not a parent in it
                (404, never 403).
            MemberNotFound: ``member_id`` is not a dependent of that family.
        """
        family = await self._family_of(caller)
        me = None if family is None else family.member(caller)
        if family is None or family.id != family_id or me is None or me.role != "parent":
            raise FamilyNotFound(NOT_YOURS)
        member = family.member(member_id)
        if member is None or member.role != "dependent":
            raise MemberNotFound(NO_MEMBER)
        return await self.erase(member_id, "parent")

    async def erased(self, user_ids: Sequence[str]) -> frozenset[str]:
        """Those of ``user_ids`` whose erasure has begun (a fresh read)."""
        return await self._accounts.erased(user_ids) if user_ids else frozenset()

    async def _family_of(self, user_id: str) -> Family | None:
        standing = (await self._families.read(Reads(users=(user_id,)))).memberships[user_id]
        if standing.family_id is None:
            return None
        family = (await self._families.read(Reads(family_id=standing.family_id))).family
        return family if family is not None and family.member(user_id) is not None else None


def _last_parent(family: Family, user_id: str) -> bool:
    """Whether ``user_id`` is the only parent of ``family`` and others remain."""
    me = family.member(user_id)
    others = [m for m in family.members if m.user_id != user_id]
    return (
        me is not None
        and me.role == "parent"
        and bool(others)
        and not any(m.role == "parent" for m in others)
    )
