"""Roll-over: older messages move, in order, from the live conversation document into
archive segments, so the live document stays near ``SPARK_LIVE_DOC_BYTES`` (fast to
load, cheap to write) and never meets Firestore's 1 MiB limit.

A move is three writes, safe to interrupt anywhere:

0. a compare-and-set write claims the move (``archiving: {segment: n, until}``), so two
   moves of one conversation never overlap;
1. the segment is written (``archive/{n}``), with the messages it will hold, and the
   index of the files they name (``ConversationStore.archive``: a file lookup reads one
   segment, not all of them);
2. one compare-and-set write drops those messages from the live document, moves the
   marker (``archived.segments = n``) and releases the claim.

Between the two, the messages are in both places; readers count only the segments the
marker names, so each message is read once. A move that died after step 1 is simply
redone (the segment is rewritten). The cut never separates a tool call from its result,
never takes a call still waiting for its result, and keeps the latest user message and
the last ``keep`` messages live, so the history the model sees is the same before and
after.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from shared.schemas.documents import (
    ArchiveClaim,
    ArchiveMarker,
    ArchiveSegment,
    Conversation,
    Message,
)
from shared.store.base import ConversationStore
from shared.store.patch import DOCUMENT_OVERHEAD, field_size, stored_size

log = logging.getLogger(__name__)

# A move's claim: a move that died is redone by the next roll-over after this long.
CLAIM = timedelta(seconds=60)


def live_size(conversation: Conversation) -> int:
    """The live document's stored size (by Firestore's rules)."""
    document = conversation.to_firestore()
    return DOCUMENT_OVERHEAD + sum(field_size(k, v) for k, v in document.items())


def _cuttable(messages: list[Message], index: int) -> bool:
    """Moving ``messages[:index]`` keeps every call with its result, on one side."""
    before, after = messages[:index], messages[index:]
    calls_before = {p.tool_call.id for m in before for p in m.content if p.tool_call}
    results_before = {
        p.tool_result.tool_call_id for m in before for p in m.content if p.tool_result
    }
    results_after = {p.tool_result.tool_call_id for m in after for p in m.content if p.tool_result}
    return calls_before <= results_before and not (results_after & calls_before)


def plan(conversation: Conversation, budget: int, keep: int) -> list[Message]:
    """The oldest messages to move so the live document falls to about three quarters
    of ``budget`` (none if it is within ``budget``, or if nothing may move)."""
    messages = conversation.messages
    size = live_size(conversation)
    if size <= budget:
        return []
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    limit = min(len(messages) - keep, users[-1] if users else len(messages))
    target = size - budget * 3 // 4
    freed, best = 0, 0
    for index in range(1, max(limit, 0) + 1):
        freed += stored_size(messages[index - 1].to_firestore())
        if _cuttable(messages, index):
            best = index
            if freed >= target:
                break
    return messages[:best]


def claim(
    conversation: Conversation, budget: int, keep: int, now: datetime, until: datetime
) -> tuple[Conversation, int, list[Message]]:
    """Step 0 of a move: plan it on the latest document and claim it, so two moves of
    one conversation never overlap. Unchanged (and nothing to move) when there is
    nothing to do or another live move holds the claim."""
    held = conversation.archiving
    if held is not None and held.until > now:
        return conversation, 0, []
    moving = plan(conversation, budget, keep)
    if not moving:
        return conversation, 0, []
    marker = conversation.archived
    number = (marker.segments if marker else 0) + 1
    claimed = conversation.model_copy(
        update={"archiving": ArchiveClaim(segment=number, until=until)}
    )
    return claimed, number, moving


def drop(conversation: Conversation, moved: list[str], segment: int) -> Conversation:
    """Step 2 of a move: the live document without the messages segment ``segment``
    now holds, its claim released (unchanged if the claim is no longer this move's)."""
    held = conversation.archiving
    if held is None or held.segment != segment:
        return conversation
    marker = conversation.archived
    done = marker.segments if marker else 0
    ids = [m.id for m in conversation.messages[: len(moved)]]
    if done != segment - 1 or ids != moved:
        return conversation.model_copy(update={"archiving": None})
    count = (marker.count if marker else 0) + len(moved)
    # Segments written before the file index stay unindexed until a lookup indexes them.
    unindexed = marker.legacy if marker else 0
    moved_marker = ArchiveMarker(
        count=count, newest_id=moved[-1], segments=segment, unindexed=unindexed
    )
    return conversation.model_copy(
        update={
            "messages": conversation.messages[len(moved) :],
            "archived": moved_marker,
            "archiving": None,
        }
    )


async def roll_over(
    store: ConversationStore,
    user_id: str,
    conversation: Conversation,
    budget: int,
    keep: int,
    now: datetime,
) -> Conversation:
    """Move older messages into the archive if the live document is over ``budget``."""
    known = store.size(user_id, conversation.id)
    if known is not None and known <= budget:
        return conversation  # the common case, decided without serialising anything
    until = now + CLAIM

    def take(c: Conversation) -> tuple[Conversation, tuple[int, list[Message]] | None]:
        claimed, number, moving = claim(c, budget, keep, now, until)
        return claimed, ((number, moving) if moving else None)

    conversation, planned = await store.apply(user_id, conversation.id, take)
    if planned is None:
        return conversation  # another move holds the claim, or nothing to move now
    number, moving = planned
    segment = ArchiveSegment(
        conversation_id=conversation.id, segment=number, messages=moving, created_at=now
    )
    await store.archive(user_id, segment)
    moved = [m.id for m in moving]
    updated = await store.mutate(user_id, conversation.id, lambda c: drop(c, moved, number))
    log.info(
        "conversation %s: %d messages rolled over into segment %d",
        conversation.id,
        len(moved),
        number,
    )
    return updated


async def roll_over_stored(
    store: ConversationStore,
    user_id: str,
    conversation_id: str,
    budget: int,
    keep: int,
    now: datetime,
) -> None:
    """``roll_over`` on the conversation as stored now: for one written outside this
    store (a family message, delivered in a transaction), whose size it cannot know."""
    conversation = await store.get(user_id, conversation_id)
    if conversation is not None:
        await roll_over(store, user_id, conversation, budget, keep, now)
