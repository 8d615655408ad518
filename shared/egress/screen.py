"""The AI opt-out, decided in one place: the screen of the one egress (DESIGN §8, §13).

The rule. A member who has opted out (``ai_reads_family_messages`` false, or their
account being erased) has no message of theirs given to any model; a reader who has
opted out is given no family message at all. It holds from the next request on.

Fresh reads. Before every provider request, what ``user_id``'s model may no longer be
sent is worked out afresh from what the store says at that moment (never a copy kept
in memory): the provenance record (which family messages, by whom, this user's model
was ever given: ``provenance.py``) and the current settings of those authors, of the
members the request's ``read_family_messages`` results name, and of the user. Nothing
is remembered between requests, so an opt-out holds in every process, also for runs
and tasks queued before it.

What is withheld. The family tools only mark what they give (``marks.py``); here a
request is screened whole:

* a stored ``read_family_messages`` result: a reader who opted out sees a note in its
  place (``OWNER_OPTED_OUT``); each message whose author, or a member it quotes, opted
  out becomes a note saying so (``AUTHOR_OPTED_OUT``); a result not in the tool's
  shape (cut, or not ours) is withheld whole (``UNREADABLE``), as is one stored before
  names were fenced (``marks.OUTDATED``); a refusal holds nothing and stays;
* every other copy of a withheld message's words, wherever it is (every turn's text,
  the user's own too, every tool call's arguments, every tool result): each run of its
  words is blanked (``words.py`` says what a run is);
* the provider state of earlier turns (encrypted reasoning, thought signatures,
  response ids) cannot be read, so once any words are withheld it is not sent back at
  all: it may have been made from them.

Changing the rule means this module, ``words.py`` (which words are a member's) and
``provenance.py`` (what was given, and so may be withheld).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from shared.egress import marks
from shared.egress.provenance import ProvenanceStore
from shared.egress.words import Withheld
from shared.llm.base import ChatMessage, ModelRequest, ToolCallRequest

OWNER_OPTED_OUT = (
    "You have turned off Spark AI Agent reading family messages (aiReadsFamilyMessages is "
    "false in your settings), so family messages are not shown to the agent. Turn it back "
    "on in your settings to let the agent read them."
)
AUTHOR_OPTED_OUT = (
    "Its author has turned off Spark AI Agent reading their family messages, so this "
    "message is withheld."
)
UNREADABLE = "These family messages are no longer shown to the agent."


class OptOuts(Protocol):
    """Who has turned off AI reading of their family messages (``Preferences``)."""

    async def opted_out(self, user_ids: Iterable[str]) -> frozenset[str]:
        """Those of ``user_ids`` who have, as the store says now."""
        ...


@dataclass(frozen=True, slots=True)
class Withholding:
    """What one user's next request must not carry, as the store said when it was read:
    the ``words`` of the messages withheld, who of those ``asked`` about had opted out
    (``opted_out``; ``reader`` when the user had), and whom was asked (``None``: no
    one, the user's model was never given family text and the request names none)."""

    words: Withheld = field(default_factory=Withheld)
    opted_out: frozenset[str] = frozenset()
    reader: bool = False
    asked: frozenset[str] | None = None

    def __bool__(self) -> bool:
        """Whether any member's words are withheld (what is counted and traced)."""
        return bool(self.words)

    def covers(self, named: frozenset[str] | None) -> bool:
        """Whether this was read about everyone ``named`` (``named_in``)."""
        return named is None or (self.asked is not None and named <= self.asked)

    def text(self, text: str) -> str:
        """``text`` with every withheld run of words in it blanked."""
        return self.words.text(text)


def named_in(request: ModelRequest) -> frozenset[str] | None:
    """The members the request's ``read_family_messages`` results name (their authors
    and whom they quote), or ``None`` when it holds no such result (its screen then
    needs no settings but those of the authors the user's model was given)."""
    found: set[str] | None = None
    for turn in request.messages:
        if turn.role == "tool" and turn.name == marks.READ_TOOL:
            found = found if found is not None else set()
            for entry in marks.messages(marks.loaded(turn.text)) or ():
                found |= marks.owners(entry)
    return None if found is None else frozenset(found)


class Screen:
    """Works out what is withheld from one user's model, on fresh reads."""

    def __init__(self, provenance: ProvenanceStore, opt_outs: OptOuts) -> None:
        self._provenance = provenance
        self._opt_outs = opt_outs

    async def may_read_family(self, user_id: str) -> bool:
        """Whether family messages may be read for ``user_id``'s model now (a fresh
        read): not once they have turned it off. ``read_family_messages`` asks before it
        reads, so a reader who opted out has nothing read for them, nor recorded as
        given (which would withhold every family word from their own later requests)."""
        return user_id not in await self._opt_outs.opted_out([user_id])

    async def withheld(self, user_id: str, named: frozenset[str] | None = None) -> Withholding:
        """What ``user_id``'s next request, whose read results name ``named``
        (``named_in``), must not carry: one read when the user's model was never given
        family text and the request names no one, three at most otherwise.

        Raises:
            StoreError: the record or the settings could not be read (the request is
                then not made).
        """
        authors = await self._provenance.authors(user_id)
        if not authors and named is None:
            return Withholding()
        asked = frozenset({user_id, *authors, *(named or ())})
        opted_out = await self._opt_outs.opted_out([user_id, *sorted(asked - {user_id})])
        reader = user_id in opted_out
        hidden = authors if reader else authors & opted_out
        words = Withheld()
        if hidden:
            words = Withheld.of(await self._provenance.texts(user_id, sorted(hidden)))
        return Withholding(words, opted_out, reader, asked)


class Screening:
    """The screen's read for one user's next chat request, begun before the request is
    built (``Egress.screening``) so that it overlaps another read the request waits on
    (a head start's conversation). Still a fresh read: begun once the request's message
    had arrived, and good for that one request only."""

    def __init__(self, screen: Screen, user_id: str) -> None:
        self.user_id = user_id
        self._screen = screen
        self._read = asyncio.ensure_future(screen.withheld(user_id))
        self.taken = False

    async def take(self, user_id: str, named: frozenset[str] | None = None) -> Withholding:
        """What the request for ``user_id`` (naming ``named``) must not carry, once: the
        read begun ahead, or, if that did not ask about everyone named, a new one.

        Raises:
            ValueError: another user's request, or a second request.
            StoreError: as ``Screen.withheld``.
        """
        if user_id != self.user_id or self.taken:
            raise ValueError("a screening serves one request of its own user")
        self.taken = True
        read = await self._read
        return read if read.covers(named) else await self._screen.withheld(user_id, named)

    async def close(self) -> None:
        """Let the read go when no request took it (its failure, if any, with it);
        nothing to do once ``taken``."""
        if not self._read.done():
            self._read.cancel()
            await asyncio.wait({self._read})
        if not self._read.cancelled():
            self._read.exception()  # retrieved: a request that was never made failed nothing


def _entry(entry: Any, withholding: Withholding) -> Any:
    if not marks.owners(entry) & withholding.opted_out:
        return entry
    blank = {k: v for k, v in entry.items() if k != "text"}
    return {**blank, "withheld": AUTHOR_OPTED_OUT}


def screened_result(text: str, withholding: Withholding) -> str:
    """One stored ``read_family_messages`` result as the model may see it now (see the
    module): withheld whole, or each message of a member who opted out withheld."""
    value = marks.loaded(text)
    if marks.is_refusal(value):
        return text
    if withholding.reader:
        return json.dumps({"withheld": OWNER_OPTED_OUT})
    entries = marks.messages(value)
    if entries is None:
        return json.dumps({"withheld": UNREADABLE})
    if not marks.current(value):
        return json.dumps({"withheld": marks.OUTDATED})
    kept = [_entry(e, withholding) for e in entries]
    if kept == entries:
        return text
    return json.dumps({**value, "messages": kept}, ensure_ascii=False)


def _turn(turn: ChatMessage, withholding: Withholding) -> ChatMessage:
    if turn.role == "tool" and turn.name == marks.READ_TOOL:
        turn = replace(turn, text=screened_result(turn.text, withholding))
    if not withholding:
        return turn
    calls = tuple(
        ToolCallRequest(c.id, c.name, withholding.text(c.arguments)) for c in turn.tool_calls
    )
    return replace(turn, text=withholding.text(turn.text), tool_calls=calls, state=None)


def screened(request: ModelRequest, withholding: Withholding) -> ModelRequest:
    """``request`` as it may leave (see the module); what the family tools stored
    before names were fenced is withheld too (``marks.refenced``). The system prompt
    and the tools' specs are ours and are sent as they are."""
    turns = [_turn(t, withholding) for t in marks.refenced(request.messages)]
    if turns == request.messages:
        return request
    return replace(request, messages=turns)


async def quoted_authors(provenance: ProvenanceStore, user_id: str, text: str) -> frozenset[str]:
    """The members other than ``user_id`` whose words, as ``user_id``'s model was given
    them, ``text`` carries (by the screen's own rule, ``Withheld``): what a message the
    agent sends for ``user_id`` quotes, and so inherits (``Message.quotes``).

    Raises:
        StoreError: the record could not be read (nothing is sent).
    """
    others = await provenance.authors(user_id) - {user_id}
    if not others:
        return frozenset()
    given = await provenance.given(user_id, sorted(others))
    return frozenset(g.author_id for g in given if Withheld.of([g.text]).found_in(text))
