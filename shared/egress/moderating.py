"""Who is moderated, and a user's turn judged beside the model's reply to it (DESIGN §16).

``SPARK_MODERATION`` says whose turns are judged: a family's dependents (the default),
everyone, or no one. Whether a user is a dependent is read from the store at each turn
(``Roles``), never remembered: a role changed in another process holds at once.

A covered user's turn is judged while the model request is already on its way
(``held``): the reply's first event is held until the verdict, so moderation adds time
only when the moderator is slower than the model's first token. A flagged turn ends the
stream with ``TurnModerated`` (the run answers with its fixed, kind reply; whatever the
model had begun is never seen). A moderator that fails or is late decides by
``SPARK_MODERATION_FAIL`` for a dependent (``closed``: the turn is not answered and they
are asked to try again) and always goes on for an adult.

The reply to a covered user is judged as it streams (``judged_reply``), a sentence at a
time beside the stream, and its finish waits for the last verdict: a flagged passage
ends the stream with ``ReplyWithheld`` (the run ends ``withheld``, and the document
keeps a short note in place of what had streamed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from shared.errors import ModerationUnavailable, ReplyWithheld, TurnModerated
from shared.llm.base import ChatMessage, Finish, ModelEvent, ModelRequest, TextDelta
from shared.llm.moderation import Category, Verdict
from shared.schemas.documents import Controls

log = logging.getLogger(__name__)

Mode = Literal["off", "dependents", "everyone"]
FailMode = Literal["closed", "open"]
Covered = Literal["dependent", "adult"]

DEFAULT_HELPLINE = "Childline on 0800 1111 (free, any time, and it will not show on a phone bill)"

KIND_REPLY = (
    "I can't help with that one, but I'm happy to help with something else, such as "
    "homework, a question you're curious about, or a story. If something has upset or "
    "worried you, it's a good idea to talk to a parent, a teacher or another adult you "
    "trust."
)
SELF_HARM_REPLY = (
    "It sounds like you might be going through something really hard, and I'm glad you "
    "said something. You don't have to deal with it on your own. Please talk to a parent, "
    "a teacher or another adult you trust, or you can talk to {helpline}. If you are in "
    "danger right now, call 999."
)


def kind_reply(category: Category | None, helpline: str) -> str:
    """The fixed reply to a flagged turn: supportive, with ``helpline``, for self-harm."""
    if category == "self_harm":
        return SELF_HARM_REPLY.format(helpline=helpline)
    return KIND_REPLY


class Standing(Protocol):
    """A user's role in their family and, for a dependent, their parents' controls."""

    @property
    def role(self) -> str | None: ...

    @property
    def controls(self) -> Controls | None: ...


class Roles(Protocol):
    """Each user's role in their family, and a dependent's controls, as stored now
    (``Families``)."""

    async def standing(self, user_id: str) -> Standing:
        """Their role (``parent``, ``dependent``, or ``None`` for a user in no family)
        and, for a dependent, their parents' controls (DESIGN §16), read afresh."""
        ...


@dataclass(frozen=True, slots=True)
class ModerationPolicy:
    """``SPARK_MODERATION``, ``SPARK_MODERATION_FAIL`` and ``SPARK_HELPLINE``."""

    mode: Mode = "dependents"
    fail: FailMode = "closed"
    helpline: str = DEFAULT_HELPLINE

    async def covered_as(self, standing: Awaitable[str | None]) -> Covered | None:
        """Whether the user whose role ``standing`` reads is judged, and as whom."""
        if self.mode == "off":
            return None
        if await standing == "dependent":
            return "dependent"
        return "adult" if self.mode == "everyone" else None

    def closes(self, covered: Covered) -> bool:
        """Whether a failed verdict stops the turn (a dependent's, with ``closed``)."""
        return covered == "dependent" and self.fail == "closed"


def users_turn(request: ModelRequest) -> ChatMessage | None:
    """The user's turn a request answers (its last message, when it is the user's: a
    later step of a run answers tool results, and its turn was judged at the first)."""
    if request.messages and request.messages[-1].role == "user":
        return request.messages[-1]
    return None


async def verdict_of(
    judging: Awaitable[Verdict], policy: ModerationPolicy, covered: Covered
) -> Verdict | None:
    """``judging``'s verdict; ``None`` when the moderator failed and the policy lets the
    turn go on (logged, without anything said).

    Raises:
        ModerationUnavailable: it failed, and ``covered``'s turns fail closed.
    """
    try:
        return await judging
    except ModerationUnavailable as exc:
        log.warning("moderation failed (%s): %s", covered, exc.detail)
        if policy.closes(covered):
            raise
        return None


async def held(
    stream: AsyncGenerator[ModelEvent, None],
    judging: asyncio.Future[Verdict | None],
    helpline: str,
) -> AsyncGenerator[ModelEvent, None]:
    """``stream``, its request sent at once, its first event held until ``judging``'s
    verdict; a flagged turn ends it with ``TurnModerated`` before anything of the
    model's is passed on.

    Raises:
        TurnModerated: the turn was flagged.
        ModerationUnavailable: the moderator failed, and the turn fails closed.
    """
    first = asyncio.ensure_future(anext(stream))  # the request leaves now
    try:
        try:
            verdict = await judging
        except BaseException:
            first.cancel()
            with contextlib.suppress(BaseException):
                await first
            raise
        if verdict is not None and verdict.flagged:
            first.cancel()
            with contextlib.suppress(BaseException):
                await first
            raise TurnModerated(verdict.category or "", kind_reply(verdict.category, helpline))
        try:
            event = await first
        except StopAsyncIteration:
            return
        yield event
        async for event in stream:
            yield event
    finally:
        if not judging.done():
            judging.cancel()
        await stream.aclose()


SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+|\n+")
PASSAGE_CHARS = 400
"""A passage with no sentence's end in it is judged once this long (a list, a poem)."""


def passages(buffer: str) -> tuple[list[str], str]:
    """The whole sentences at the start of ``buffer``, and what is left of it."""
    found: list[str] = []
    at = 0
    for end in SENTENCE_END.finditer(buffer):
        found.append(buffer[at : end.end()])
        at = end.end()
    rest = buffer[at:]
    if len(rest) >= PASSAGE_CHARS:
        found.append(rest)
        rest = ""
    return [p for p in found if p.strip()], rest


def _flagged(done: list[asyncio.Future[Verdict | None]]) -> Verdict | None:
    for verdict in done:
        result = verdict.result()
        if result is not None and result.flagged:
            return result
    return None


async def judged_reply(
    stream: AsyncGenerator[ModelEvent, None],
    judge: Callable[[str], Awaitable[Verdict | None]],
    covering: asyncio.Future[Covered | None],
) -> AsyncGenerator[ModelEvent, None]:
    """``stream``, its text judged as it comes, a sentence (``passages``) at a time,
    each verdict beside the stream (it is not slowed); its finish is held until every
    passage's verdict is in, so no flagged reply ends as complete.

    Raises:
        ReplyWithheld: a passage was flagged (at the first event after its verdict).
        ModerationUnavailable: a verdict failed, and the reply fails closed.
    """
    pending: list[asyncio.Future[Verdict | None]] = []
    buffer = ""

    def check() -> None:
        done = [p for p in pending if p.done()]
        flagged = _flagged(done)
        if flagged is not None:
            raise ReplyWithheld(flagged.category or "")
        pending[:] = [p for p in pending if not p.done()]

    try:
        async for event in stream:
            if covering.done() and covering.result() is None:
                yield event  # not covered (known once read, beside the request)
                continue
            if isinstance(event, TextDelta):
                whole, buffer = passages(buffer + event.text)
                pending.extend(asyncio.ensure_future(judge(p)) for p in whole)
            elif isinstance(event, Finish):
                if buffer.strip():
                    pending.append(asyncio.ensure_future(judge(buffer)))
                buffer = ""
                if pending:
                    await asyncio.wait(pending)
            check()
            yield event
    finally:
        for verdict in pending:
            verdict.cancel()
        if not covering.done():
            covering.cancel()
        await stream.aclose()
