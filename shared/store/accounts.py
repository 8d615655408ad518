"""The storage interface of an account's erasure (DESIGN §15): its record at
``/deletions/{deletionId}`` (server-only; ``shared/schemas/deletions.py``), and every
document under the user's own top-level collection, ``/{uid}/**``, listed and deleted
in pages.

Each page is one atomic write: the documents it deletes and the record moved on, on the
condition that the record is still the version the page was judged on. Two deliveries
of one page (a queue that redelivers, a process killed after its commit) cannot both
land; the one that loses writes nothing and reads the record again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shared.schemas.deletions import Deletion

Path = tuple[str, ...]
"""A document's path, collection and document ids in turn: ``("u1", "client", ...)``."""

DELETIONS = "deletions"
"""The top-level collection of deletion records (not a user's)."""


def deletion_path(deletion_id: str) -> Path:
    return (DELETIONS, deletion_id)


class AccountStore(Protocol):
    """Deletion records, and the documents of the account each one erases."""

    async def deletion(self, deletion_id: str) -> Deletion | None:
        """The record, as stored now (``None``: there is none).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def begin(self, deletion: Deletion) -> Deletion:
        """Create ``deletion`` unless a record with its id exists (on that condition):
        the record as stored afterwards, the earlier one if there was one.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def erased(self, user_ids: Sequence[str]) -> frozenset[str]:
        """Those of ``user_ids`` whose account has a deletion record (being erased, or
        erased): one read for all of them, never a copy kept in memory.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def listed(self, user_id: str, limit: int) -> list[Path]:
        """At most ``limit`` paths of the documents under ``/{user_id}/**`` (any depth),
        in path order. Only ids are read, never the documents' contents.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def commit(self, read: Deletion, after: Deletion, deleted: Sequence[Path]) -> bool:
        """In one atomic write: delete every document of ``deleted`` (one already gone
        is no error) and write ``after`` as the record, if the record is still at
        ``read.version`` (``after.version`` must be the next). ``False``, and nothing
        written, when another write moved the record on meanwhile.

        Raises:
            StoreError: the store failed (nothing is written).
        """
        ...
