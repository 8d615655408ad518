"""``Eraser``: one delivery of an erasure's task takes the account one step on, as its
deletion record says (``shared/schemas/deletions.py`` draws the steps).

Each step is idempotent and ends in one commit that moves the record on, on the
condition that it is still the version read (``AccountStore.commit``); a page of
documents is deleted in that same commit. Only the delivery whose commit landed
enqueues the next task, named by the record's new version: a delivery that lost the
race (a redelivery, or the local emulator running one task twice) stops there, so two
chains become one. A delivery that dies before its commit leaves the record as it was,
and its redelivery does the step again; one that dies after it is redelivered with an
older step and does the record's current one. Correctness comes from the record,
never from the queue.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial

from shared.auth.accounts import Accounts
from shared.clock import Clock
from shared.erasure.former import mark_conversation, mark_segment, others_of
from shared.erasure.service import step_task
from shared.errors import LastParent, NoActiveRun, NotFound, TaskFinished
from shared.families import membership
from shared.queue.base import TaskQueue
from shared.schemas.deletions import Deletion, Step, uid_hash
from shared.schemas.server import TaskLedger
from shared.schemas.tasks import EraseTask
from shared.store.accounts import AccountStore, Path
from shared.store.base import ConversationStore, FamilyStore, Household, Reads, TaskLedgerStore
from shared.store.files import FileStore

log = logging.getLogger(__name__)

PAGE = 200
"""Documents (or files) a page deletes: one commit, well under Firestore's 500 writes."""
WAIT = timedelta(seconds=5)
"""How long a step that waits (a run still stopping, a family in the way) waits."""
STOP_AT_MOST = timedelta(minutes=15)
"""Past this since the request, runs and tasks still going are left to end by their
leases (their writes then find nothing: ``steps`` module docstring)."""
CANCELLED = "The account is being deleted."
# A task's ended statuses (``shared.tasks.sections.TERMINAL``, which sits above this).
_ENDED = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class Move:
    """What a step did: the record as it leaves it, and the documents to delete with it."""

    after: Deletion
    deleted: Sequence[Path] = ()


@dataclass(frozen=True, slots=True)
class Wait:
    """The step cannot go on yet: it is tried again after ``WAIT``."""

    why: str


Stop = Callable[[str, str], Awaitable[object]]
"""Stop a user's run in a conversation wherever it runs (``RunService.stop``)."""
Cancel = Callable[[str, str, str], Awaitable[object]]
"""Cancel a user's task, or ask its tool to stop (``TaskScheduler.cancel_task``)."""


@dataclass(frozen=True)
class ErasureParts:
    """What the steps work on."""

    accounts: AccountStore
    families: FamilyStore
    conversations: ConversationStore
    ledgers: TaskLedgerStore
    files: FileStore
    auth: Accounts
    queue: TaskQueue
    clock: Clock
    stop: Stop
    cancel: Cancel
    page: int = PAGE


class Eraser:
    """Serves the deliveries of erasure tasks; one per process."""

    def __init__(self, parts: ErasureParts) -> None:
        self._parts = parts

    async def step(self, task: EraseTask) -> Deletion | None:
        """Take the erasure ``task`` names one step on; the record as this delivery left
        it (``None``: no such erasure, or not this user's)."""
        parts = self._parts
        record = await parts.accounts.deletion(task.deletion_id)
        if record is None or record.uid_hash != uid_hash(task.user_id):
            log.warning("erase task %s: no such erasure for its user", task.deletion_id)
            return None
        if record.step == "finished":
            return record
        moved = await self._work(task.user_id, record)
        if isinstance(moved, Wait):
            log.info("erasure %s waits: %s", record.id, moved.why)
            due = parts.clock.now() + WAIT
            await parts.queue.enqueue(step_task(task.user_id, record, due))
            return record
        after = moved.after.model_copy(update={"version": record.version + 1})
        if not await parts.accounts.commit(record, after, moved.deleted):
            return await parts.accounts.deletion(record.id)  # another delivery moved it on
        if after.step != "finished":
            await parts.queue.enqueue(step_task(task.user_id, after))
        return after

    async def _work(self, user_id: str, record: Deletion) -> Move | Wait:
        steps: dict[Step, Callable[[str, Deletion], Awaitable[Move | Wait]]] = {
            "stopping": self._stop_all,
            "family": self._leave,
            "documents": partial(self._documents, then="files"),
            "files": partial(self._files, then="sweep"),
            "sweep": self._sweep,
            "account": self._account,
        }
        return await steps[record.step](user_id, record)

    async def _stop_all(self, user_id: str, record: Deletion) -> Move | Wait:
        """Stop every live run and cancel every task; wait until none is left going (or
        until ``STOP_AT_MOST``: what is left then ends by its lease)."""
        parts, now = self._parts, self._parts.clock.now()
        ledger = await parts.ledgers.get(user_id)
        for conversation_id in _live_runs(ledger, now):
            with contextlib.suppress(NoActiveRun, NotFound):
                await parts.stop(user_id, conversation_id)
        for task_id in _open_tasks(ledger):
            with contextlib.suppress(TaskFinished, NotFound):
                await parts.cancel(user_id, task_id, CANCELLED)
        ledger = await parts.ledgers.get(user_id)
        going = _live_runs(ledger, now) or _running_tasks(ledger, now)
        if going and now - record.requested_at < STOP_AT_MOST:
            return Wait(f"{len(going)} runs or tasks still stopping")
        return Move(replace_step(record, "family"))

    async def _leave(self, user_id: str, record: Deletion) -> Move | Wait:
        """Leave the family (a sole member's goes, with its invites) and revoke the
        invites the user made, in one transaction."""
        families = self._parts.families
        standing = (await families.read(Reads(users=(user_id,)))).memberships[user_id]
        if standing.family_id is not None:
            reads = Reads(family_id=standing.family_id, all_invites=True, users=(user_id,))
            change = partial(leave_for_good, user_id=user_id, now=self._parts.clock.now())
            try:
                await families.apply(reads, change)
            except LastParent:
                # The others' last other parent left after the request: never a family
                # of children without a parent; the family's parents are asked to act.
                return Wait("the last parent of a family with others")
        return Move(replace_step(record, "documents"))

    async def _documents(self, user_id: str, record: Deletion, then: Step) -> Move:
        """One page of the user's documents deleted (the others' copies of what they
        wrote marked first); ``then`` once none is left."""
        paths = await self._parts.accounts.listed(user_id, self._parts.page)
        if not paths:
            return Move(replace_step(record, then))
        marked = await self._mark_copies(user_id, paths)
        counts = record.counts.model_copy(
            update={
                "documents": record.counts.documents + len(paths),
                "pages": record.counts.pages + 1,
                "copies_marked": record.counts.copies_marked + marked,
            }
        )
        return Move(record.model_copy(update={"counts": counts}), paths)

    async def _files(self, user_id: str, record: Deletion, then: Step) -> Move:
        """One page of the user's files deleted (``{uid}/…``); ``then`` once none is left."""
        files = self._parts.files
        paths = [f.path for f in await files.listing(f"{user_id}/", None, self._parts.page)]
        if not paths:
            return Move(replace_step(record, then))
        gone = await files.delete(paths)
        counts = record.counts.model_copy(
            update={"files": record.counts.files + gone, "pages": record.counts.pages + 1}
        )
        return Move(record.model_copy(update={"counts": counts}))

    async def _sweep(self, user_id: str, record: Deletion) -> Move:
        """Whatever appeared meanwhile (a write in flight when its run was stopped),
        deleted again; the Auth account once a page finds neither documents nor files."""
        moved = await self._documents(user_id, record, then="sweep")
        if moved.deleted:
            return moved
        return await self._files(user_id, record, then="account")

    async def _account(self, user_id: str, record: Deletion) -> Move:
        """Last, the sign-in account (gone already: nothing to do)."""
        await self._parts.auth.delete(user_id)
        finished = replace_step(record, "finished")
        return Move(finished.model_copy(update={"finished_at": self._parts.clock.now()}))

    async def _mark_copies(self, user_id: str, paths: Sequence[Path]) -> int:
        """Mark ``author.deleted`` on the user's messages in the other members' copies of
        each shared conversation among ``paths``: how many copies changed."""
        conversations, marked = self._parts.conversations, 0
        for path in paths:
            if len(path) != 4 or path[1:3] != ("client", "conversations"):
                continue
            mine = await conversations.get(user_id, path[3])
            for other in [] if mine is None else others_of(mine, user_id):
                marked += await self._mark_copy(other, path[3], user_id)
        return marked

    async def _mark_copy(self, owner: str, conversation_id: str, user_id: str) -> int:
        conversations = self._parts.conversations
        try:
            before = await conversations.get(owner, conversation_id)
            after = await conversations.mutate(
                owner, conversation_id, lambda c: mark_conversation(c, user_id)
            )
        except NotFound:
            return 0  # that copy is gone (its owner deleted it, or was erased)
        changed = int(before is not None and before != after)
        for segment in await conversations.segments(owner, conversation_id):
            if (marked := mark_segment(segment, user_id)) is not None:
                await conversations.archive(owner, marked)
                changed = 1
        return changed


def replace_step(record: Deletion, step: Step) -> Deletion:
    return record.model_copy(update={"step": step})


def leave_for_good(household: Household, *, user_id: str, now: datetime) -> tuple[Household, None]:
    """The user leaves the family (``membership.remove``: a sole member's family goes with
    its invites), the invites they made go with their tokens (their links stop working),
    and their id is taken off the invites others made. Done already: nothing changes.

    Raises:
        LastParent: they are the last parent and others remain.
    """
    family = household.family
    if family is None or family.member(user_id) is None:
        return household, None
    left, _ = membership.remove(household, caller=user_id, target=user_id, now=now)
    if left.family is None:
        return left, None
    invites = {
        iid: (
            invite.model_copy(update={"used_by": [u for u in invite.used_by if u != user_id]})
            if user_id in invite.used_by
            else invite
        )
        for iid, invite in left.invites.items()
        if invite.created_by != user_id
    }
    kept = left.family.model_copy(update={"invite_ids": list(invites)})
    return replace(left, family=kept, invites=invites), None


def _live_runs(ledger: TaskLedger, now: datetime) -> list[str]:
    return [cid for cid, slot in ledger.runs.items() if slot.until > now]


def _open_tasks(ledger: TaskLedger) -> list[str]:
    return [tid for tid, r in ledger.tasks.items() if r.status not in _ENDED]


def _running_tasks(ledger: TaskLedger, now: datetime) -> list[str]:
    return [
        tid
        for tid, r in ledger.tasks.items()
        if r.status == "running" and (r.lease_expires_at is None or r.lease_expires_at > now)
    ]
