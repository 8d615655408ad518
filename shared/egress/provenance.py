"""Provenance: which family messages, by which author, a user's model was ever given.

The opt-out (DESIGN §8) withholds a member's words from every later model call. What a
call may carry is not only what its window holds: a reply that quoted a member is
still sent after the read that gave the words has left the window, has rolled over
into the archive, or was copied into a task's arguments. So the words are recorded
*when they are given* (``read_family_messages`` records them before it returns), and
the egress screens every request against this record, read fresh, not against the
window.

A message an agent sent on a member's behalf may carry other members' words (it quotes
what the sender's model was given): it names them (``Message.quotes``), and whoever's
model is given it has it recorded once for its author and once for each member it
quotes (``relayed``), so that each one's opt-out withholds it.

Kept per user, server-only: an index of the authors ever given (one small document,
read at every model call), and one document per message given (read only when one of
those authors, or the reader, has opted out). A message is recorded once, whatever
how often it is read.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from shared.schemas.server import GivenAuthors, GivenText

Path = tuple[str, ...]


def index_path(user_id: str) -> Path:
    """The authors whose words ``user_id``'s model was given (``GivenAuthors``)."""
    return (user_id, "server", "provenance", "current")


def given_path(user_id: str, message_id: str) -> Path:
    """One message given to ``user_id``'s model (``GivenText``)."""
    return (*index_path(user_id), "given", message_id)


@dataclass(frozen=True, slots=True)
class Given:
    """One family message as a user's model was given it."""

    message_id: str
    author_id: str
    text: str
    given_at: datetime

    def relayed(self, quoted_author_id: str) -> Given:
        """The same text recorded as ``quoted_author_id``'s words (its own document)."""
        return Given(
            f"{self.message_id}~{quoted_author_id}", quoted_author_id, self.text, self.given_at
        )

    def document(self) -> dict[str, Any]:
        return GivenText(
            message_id=self.message_id,
            author_id=self.author_id,
            text=self.text,
            given_at=self.given_at,
        ).to_firestore()


class ProvenanceStore(Protocol):
    """The record of family text given to each user's model (server-only documents)."""

    async def record(self, user_id: str, given: Sequence[Given]) -> None:
        """Keep ``given`` (a message given again is kept once).

        Raises:
            StoreError: nothing was kept (the text must then not be given).
        """
        ...

    async def authors(self, user_id: str) -> frozenset[str]:
        """Every author whose words ``user_id``'s model was ever given (one read)."""
        ...

    async def texts(self, user_id: str, author_ids: Sequence[str]) -> list[str]:
        """The texts by ``author_ids`` given to ``user_id``'s model."""
        ...

    async def given(self, user_id: str, author_ids: Sequence[str]) -> list[Given]:
        """What of ``author_ids``'s ``user_id``'s model was given, with its authors."""
        ...


class InMemoryProvenanceStore:
    """``ProvenanceStore`` as documents by path, as Firestore holds them; ``reads``
    counts the reads."""

    def __init__(self) -> None:
        self.documents: dict[Path, dict[str, Any]] = {}
        self.reads = 0

    async def record(self, user_id: str, given: Sequence[Given]) -> None:
        if not given:
            return
        index = self.documents.get(index_path(user_id)) or {"authors": []}
        authors = list(dict.fromkeys([*index["authors"], *(g.author_id for g in given)]))
        for one in given:
            self.documents[given_path(user_id, one.message_id)] = one.document()
        self.documents[index_path(user_id)] = GivenAuthors(authors=authors).to_firestore()

    async def authors(self, user_id: str) -> frozenset[str]:
        self.reads += 1
        index = self.documents.get(index_path(user_id))
        return frozenset(GivenAuthors.model_validate(index).authors if index else ())

    async def texts(self, user_id: str, author_ids: Sequence[str]) -> list[str]:
        return [g.text for g in await self.given(user_id, author_ids)]

    async def given(self, user_id: str, author_ids: Sequence[str]) -> list[Given]:
        self.reads += 1
        prefix = (*index_path(user_id), "given")
        wanted = set(author_ids)
        found = [
            GivenText.model_validate(copy.deepcopy(doc))
            for path, doc in self.documents.items()
            if path[:-1] == prefix
        ]
        return [
            Given(g.message_id, g.author_id, g.text, g.given_at)
            for g in found
            if g.author_id in wanted
        ]
