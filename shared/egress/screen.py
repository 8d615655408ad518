"""What a user's model may be sent now: the screen of the one egress (DESIGN §13).

Before every provider request, the texts withheld from ``user_id``'s model are worked
out afresh from two things read from the store at that moment: the provenance record
(which family messages, by whom, this user's model was ever given) and the current
settings of those authors and of the user. A member who has opted out has every
message of theirs that was given withheld; a reader who has opted out has every
family message withheld. Nothing is remembered between requests, so an opt-out holds
from the next request on, in every process.

A request is then screened whole: every turn's text (the user's own too: words they
pasted are still the member's), every tool call's arguments, every tool result. The
provider state of earlier turns (encrypted reasoning, thought signatures, response
ids) cannot be read, so once anything is withheld it is not sent back at all: it may
have been made from the withheld words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import replace
from typing import Protocol

from shared.egress.provenance import ProvenanceStore
from shared.egress.words import Withheld
from shared.llm.base import ChatMessage, ModelRequest, ToolCallRequest


class OptOuts(Protocol):
    """Who has turned off AI reading of their family messages (``Preferences``)."""

    async def opted_out(self, user_ids: Iterable[str]) -> frozenset[str]:
        """Those of ``user_ids`` who have, as the store says now."""
        ...


class Screen:
    """Works out what is withheld from one user's model, on fresh reads."""

    def __init__(self, provenance: ProvenanceStore, opt_outs: OptOuts) -> None:
        self._provenance = provenance
        self._opt_outs = opt_outs

    async def withheld(self, user_id: str) -> Withheld:
        """What ``user_id``'s next request must not carry: one read when the user's
        model was never given family text, three at most otherwise.

        Raises:
            StoreError: the record or the settings could not be read (the request is
                then not made).
        """
        authors = await self._provenance.authors(user_id)
        if not authors:
            return Withheld()
        opted_out = await self._opt_outs.opted_out([user_id, *sorted(authors)])
        hidden = authors if user_id in opted_out else authors & opted_out
        if not hidden:
            return Withheld()
        return Withheld.of(await self._provenance.texts(user_id, sorted(hidden)))


class Screening:
    """The screen's read for one user's next chat request, begun before the request is
    built (``Egress.screening``) so that it overlaps another read the request waits on
    (a head start's conversation). Still a fresh read: begun once the request's message
    had arrived, and good for that one request only."""

    def __init__(self, screen: Screen, user_id: str) -> None:
        self.user_id = user_id
        self._read = asyncio.ensure_future(screen.withheld(user_id))
        self.taken = False

    async def take(self, user_id: str) -> Withheld:
        """What the request for ``user_id`` must not carry, once.

        Raises:
            ValueError: another user's request, or a second request.
            StoreError: as ``Screen.withheld``.
        """
        if user_id != self.user_id or self.taken:
            raise ValueError("a screening serves one request of its own user")
        self.taken = True
        return await self._read

    async def close(self) -> None:
        """Let the read go when no request took it (its failure, if any, with it);
        nothing to do once ``taken``."""
        if not self._read.done():
            self._read.cancel()
            await asyncio.wait({self._read})
        if not self._read.cancelled():
            self._read.exception()  # retrieved: a request that was never made failed nothing


def _turn(turn: ChatMessage, withheld: Withheld) -> ChatMessage:
    calls = tuple(
        ToolCallRequest(c.id, c.name, withheld.text(c.arguments)) for c in turn.tool_calls
    )
    return replace(turn, text=withheld.text(turn.text), tool_calls=calls, state=None)


def screened(request: ModelRequest, withheld: Withheld) -> ModelRequest:
    """``request`` as it may leave: every withheld run of words blanked, and no
    provider state sent back (see the module). The system prompt and the tools' specs
    are ours and are sent as they are."""
    if not withheld:
        return request
    return replace(request, messages=[_turn(t, withheld) for t in request.messages])


async def quoted_authors(provenance: ProvenanceStore, user_id: str, text: str) -> frozenset[str]:
    """The members other than ``user_id`` whose words, as ``user_id``'s model was given
    them, ``text`` carries (by the screen's own rule, ``Withheld``): what a message the
    agent sends for ``user_id`` quotes, and so inherits (``Message.quotes``).

    Raises:
        StoreError: the record could not be read (nothing is then sent).
    """
    others = await provenance.authors(user_id) - {user_id}
    if not others:
        return frozenset()
    given = await provenance.given(user_id, sorted(others))
    return frozenset(g.author_id for g in given if Withheld.of([g.text]).found_in(text))
