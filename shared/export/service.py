"""``Exports``: a person's data as a zip, streamed as it is made (DESIGN §15).

The zip is ``stream_zip``'s: each member's bytes are deflated and sent as the store
gives them, with the sizes and checksums after each member (its data descriptor), so
nothing is held but the piece being written. ``contents.members`` reads the stores only
as the zip reaches each member; what an export holds at once is bounded by the largest
document (1 MiB) and a file's piece, whatever the account's size
(``bench/export.py`` measures it).
"""

from __future__ import annotations

import contextlib
import logging
import stat
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

from stream_zip import ZIP_AUTO, AsyncMemberFile, async_stream_zip

from shared.clock import Clock
from shared.errors import AccountDeleted, FamilyNotFound, MemberNotFound, NoFamily, SparkError
from shared.export import limit
from shared.export.contents import Sources, members
from shared.families.membership import NOT_YOURS
from shared.families.preferences import Tombstones
from shared.store.base import TaskLedgerStore

log = logging.getLogger(__name__)

NO_DEPENDENT = (
    "No dependent in your family has this id. A parent in a family can export the data "
    "of its dependents; check the id in your family's member list."
)
ERASED = (
    "This account is being deleted, so it can no longer be exported: what it held is being erased."
)
# Every member a plain file its owner may read and write.
_MODE = stat.S_IFREG | 0o600
# What the zip sends at a time.
_CHUNK = 64 * 1024
# Deflate's effort: text shrinks well at 6; uploads (photos, PDFs, voice clips) are
# compressed already, so 1 spends little CPU on them.
_TEXT_LEVEL, _FILE_LEVEL = 6, 1


class Exports:
    """Starts exports of people's data, at most one per account per ``every``."""

    def __init__(
        self,
        sources: Sources,
        ledgers: TaskLedgerStore,
        clock: Clock,
        every: timedelta = limit.EVERY,
        tombstones: Tombstones | None = None,
    ) -> None:
        self._sources = sources
        self._ledgers = ledgers
        self._clock = clock
        self._every = every
        self._tombstones = tombstones

    async def start(self, user_id: str) -> AsyncIterator[bytes]:
        """The user's export as a zip, made as it is read; recorded in their ledger
        before a byte is read.

        Raises:
            RateLimited: an export of this account started less than ``every`` ago
                (nothing is read, nothing changed).
            AccountDeleted: the account's erasure has begun (a fresh read): its record
                in the ledger would be written under an account being erased, and
                outlive it.
            StoreError: the ledger could not be written.
        """
        if self._tombstones is not None and await self._tombstones.erased([user_id]):
            raise AccountDeleted(ERASED)
        now = self._clock.now()
        await self._ledgers.mutate(user_id, lambda ledger: limit.claim(ledger, now, self._every))
        return self._zip(user_id, now)

    async def start_for_dependent(
        self, parent_id: str, family_id: str, member_id: str
    ) -> AsyncIterator[bytes]:
        """A dependent's export, asked for by a parent of their family (``start``, the
        limit counted on the dependent's account).

        Raises:
            FamilyNotFound: it is not the caller's family.
            MemberNotFound: the caller is not a parent in it, or ``member_id`` is no
                dependent of it.
            RateLimited, AccountDeleted: as ``start``.
        """
        try:
            family = await self._sources.families.current(parent_id)
        except NoFamily:
            raise FamilyNotFound(NOT_YOURS) from None
        if family.id != family_id:
            raise FamilyNotFound(NOT_YOURS)
        caller, member = family.member(parent_id), family.member(member_id)
        if caller is None or caller.role != "parent":
            raise MemberNotFound(NO_DEPENDENT)
        if member is None or member.role != "dependent":
            raise MemberNotFound(NO_DEPENDENT)
        return await self.start(member_id)

    async def _zip(self, user_id: str, started: datetime) -> AsyncIterator[bytes]:
        try:
            async for chunk in async_stream_zip(self._files(user_id, started), _CHUNK):
                yield chunk
        except Exception:
            # Our failure, not the person's: they may try again at once.
            log.exception("export of %s failed", user_id)
            with contextlib.suppress(SparkError):
                await self._ledgers.mutate(user_id, lambda led: limit.release(led, started))
            raise

    async def _files(self, user_id: str, started: datetime) -> AsyncIterator[AsyncMemberFile]:
        async for member in members(self._sources, user_id, started):
            level = _FILE_LEVEL if member.name.startswith("files/") else _TEXT_LEVEL
            method = ZIP_AUTO(member.bound, level=level)
            yield member.name, member.modified, _MODE, method, member.chunks
