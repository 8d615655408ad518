"""The storage interface of writes across users' subtrees in one transaction (a family
message delivered into each member's copy)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from shared.schemas.documents import Conversation

R = TypeVar("R")

Path = tuple[str, ...]
"""A document's path, collection and document ids in turn: ``("u1", "client", ...)``."""


@dataclass(frozen=True, slots=True)
class Put:
    """Write ``document`` whole at ``path`` (creating it, or replacing what is there)."""

    path: Path
    document: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Amend:
    """Turn the conversation at ``path`` from ``before`` (as this transaction read it;
    ``None``: there was none) into ``after``. The adapter writes ``after`` whole when it
    is new, and otherwise only what differs (``shared/store/patch.diff``: messages added
    at the end are appended, each changed field is set)."""

    path: Path
    before: Conversation | None
    after: Conversation


class Reader(Protocol):
    """Reads inside one transaction (``PostStore.transact``)."""

    async def get(self, path: Path) -> dict[str, Any] | None:
        """The document at ``path`` as stored, or ``None`` if there is none."""
        ...


Transacted = Callable[[Reader], Awaitable[tuple[Sequence[Put | Amend], R]]]
"""The body of one transaction: it reads what it needs through the ``Reader`` (every
read before any write), then returns the writes and what it decided. It may run more
than once (on contention), so it has no other effects; what it raises aborts the
transaction, with nothing written."""


class PostStore(Protocol):
    """Writes that span several users' subtrees and must land together or not at all:
    a family message delivered into each member's copy of a shared conversation, with
    the receipt that makes a retry harmless (``shared/families/delivery.py``)."""

    async def transact(self, work: Transacted[R], *, read_only: bool = False) -> R:
        """Run ``work`` in one transaction: what it read is what it judged, and its
        writes all land, or none does. ``read_only`` work may return no writes.

        Raises:
            StoreError: the store failed, or the transaction kept losing races.
        """
        ...
