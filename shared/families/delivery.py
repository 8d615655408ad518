"""``Delivery``: a family member's message, delivered verbatim (no model call) into every
recipient's copy of a shared conversation, in one transaction (DESIGN §8).

One transaction (``PostStore.transact``) reads the sender's receipt for the
``Idempotency-Key`` (if one was sent), their membership and family, their count of
messages sent (``allowance``) and each participant's copy; it judges the address on
what it read (``messages.address``) and the message against the sender's allowance
(``allowance.admit``: 429 past it), and writes every copy, the receipt and the count
together. So a member who leaves, a role that
changes, or a retry racing its first attempt, is judged on what is stored, never on an
earlier read: the family document is in the transaction's reads, and a change to it
(a leave) conflicts with the delivery, one waiting for the other.

A refused request writes nothing and does no work: with attachments, a read-only pass
of the same judgement runs first, so a request to a stranger (or a retry, answered
from its receipt) reads no file; only then are the files checked and made ready
(``Attachments``), and the transaction judges everything again.

The recipients' copies point at the sender's files (the checked, normalised ones):
``file`` lets any member whose copy holds a message naming a file read it, finding an
archived one through the file index the roll-over writes with each segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from shared.attachment_rules import MAX_BYTES
from shared.attachments.service import Attachments, Requested
from shared.clock import Clock
from shared.errors import NotFound, SparkError
from shared.families import allowance
from shared.families.allowance import SendLimits, sent_path
from shared.families.messages import (
    Address,
    Target,
    address,
    answered,
    fingerprint,
    message_of,
    post,
    receipt_for,
    receipt_id,
)
from shared.ids import IdGenerator
from shared.schemas.documents import (
    ArchiveMarker,
    ContentPart,
    Conversation,
    FileRef,
    Message,
    Via,
)
from shared.schemas.server import Family, Membership, Receipt, SentMessages
from shared.store.archive import roll_over_stored
from shared.store.base import Amend, ConversationStore, Path, PostStore, Put, Reader
from shared.store.households import family_path, membership_path
from shared.store.patch import stored_size

log = logging.getLogger(__name__)

# Segments written before the file index are read this many at a time to index them.
_LEGACY_PAGE = 20


def conversation_path(user_id: str, conversation_id: str) -> Path:
    return (user_id, "client", "conversations", conversation_id)


def receipt_path(user_id: str, receipt: str) -> Path:
    """Server-only: under ``/{uid}/server``, which no client may read."""
    return (user_id, "server", "deliveries", receipt)


@dataclass(frozen=True, slots=True)
class Delivered:
    """What a delivery answers: the shared conversation, the message's id (the same in
    every copy) and who received it (every participant but the sender). ``replayed``:
    a retry, answered from its receipt; nothing was delivered again."""

    conversation_id: str
    message_id: str
    recipients: list[str]
    replayed: bool = False

    @classmethod
    def of(cls, receipt: Receipt) -> Delivered:
        return cls(
            receipt.conversation_id, receipt.message_id, list(receipt.recipients), replayed=True
        )


@dataclass(frozen=True, slots=True)
class _Draft:
    """The message before the transaction names its author (from the family it reads)."""

    id: str
    text: str
    files: tuple[ContentPart, ...]
    via: Via
    at: datetime
    quotes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Posted:
    address: Address
    over_budget: list[str]


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file a member may read: its bytes, type and name."""

    data: bytes
    content_type: str
    name: str


class Delivery:
    """Verbatim messages between family members; one per process."""

    def __init__(
        self,
        posts: PostStore,
        conversations: ConversationStore,
        attachments: Attachments,
        clock: Clock,
        ids: IdGenerator,
        live_doc_bytes: int,
        history_messages: int,
        limits: SendLimits | None = None,
    ) -> None:
        self._posts = posts
        self._conversations = conversations
        self._attachments = attachments
        self._clock = clock
        self._ids = ids
        self._budget = live_doc_bytes
        self._keep = history_messages
        self._limits = limits or SendLimits()

    async def deliver(
        self,
        sender_id: str,
        text: str,
        target: Target,
        *,
        attachments: Sequence[Requested] = (),
        via: Via = "user",
        idempotency_key: str | None = None,
        quotes: Sequence[str] = (),
    ) -> Delivered:
        """Deliver ``text`` (and ``attachments``, from the sender's uploads) from
        ``sender_id`` to ``target``, as it is, with ``author {userId, displayName,
        role}`` from the family and ``via``; every copy in one transaction.

        With ``idempotency_key``, a retry by the same sender within 24 hours gets the
        first answer back (``replayed``) and nothing is delivered again. ``quotes``: the
        other members whose words the text carries (``Message.quotes``).

        Raises:
            NoFamily: the sender belongs to no family.
            RequestError: the sender named themself (400); an attachment breaks a rule.
            MemberNotFound, NotFound: the target is not in the sender's family, or has
                left; the conversation is not one of the sender's shared ones there.
            IdempotencyKeyReused: the key answered another request in the last 24 hours.
            RateLimited: the sender's allowance of messages a minute or bytes an hour is
                used up (``allowance.admit``; a retry answered from its receipt is never
                refused). Nothing is delivered, and with attachments no file is read.
            ConversationTooLarge: a copy would not fit.
        """
        asked = fingerprint(target, text, [a.storage_path for a in attachments])
        receipt = receipt_id(idempotency_key) if idempotency_key is not None else None
        files: list[ContentPart] = []
        if attachments:
            # Judged first without a write, so a refused request (or a retry) reads no file.
            # The allowance is judged on the text alone here (the files' references,
            # made below, are counted in the delivery's own transaction).
            size = len(text.encode("utf-8"))
            judge = partial(self._judge, sender_id, target, receipt, asked, self._clock.now())
            judged = await self._posts.transact(partial(judge, size), read_only=True)
            if isinstance(judged, Receipt):
                return Delivered.of(judged)
            checked = await self._attachments.check(sender_id, attachments)
            files = await self._attachments.derive(checked)
        draft = _Draft(
            self._ids.new("msg"), text, tuple(files), via, self._clock.now(), tuple(quotes)
        )
        done = await self._posts.transact(
            partial(self._post, sender_id, target, receipt, asked, draft)
        )
        if isinstance(done, Receipt):
            return Delivered.of(done)
        for user_id in done.over_budget:
            try:
                await roll_over_stored(
                    self._conversations,
                    user_id,
                    done.address.conversation_id,
                    self._budget,
                    self._keep,
                    self._clock.now(),
                )
            except SparkError:
                # The next delivery tries again; the copy has room (the reserve) till then.
                log.warning("%s: roll-over of a shared conversation failed", user_id)
        return Delivered(done.address.conversation_id, draft.id, done.address.recipients)

    async def _judge(
        self,
        sender_id: str,
        target: Target,
        receipt: str | None,
        asked: str,
        now: datetime,
        size: int,
        reader: Reader,
    ) -> tuple[list[Put | Amend], Address | Receipt]:
        """The address the transaction will judge (or the receipt of a retry), read, and
        a message of ``size`` bytes judged against the sender's allowance."""
        kept = await _replayed(sender_id, receipt, asked, now, reader)
        if kept is not None:
            return [], kept
        where = await self._address(sender_id, target, reader)
        await self._counted(sender_id, size, now, reader)
        return [], where

    async def _counted(self, sender_id: str, size: int, now: datetime, reader: Reader) -> Put:
        """The sender's allowance with one more message of ``size`` bytes counted.

        Raises:
            RateLimited: it is used up.
        """
        stored = await reader.get(sent_path(sender_id))
        sent = SentMessages.model_validate(stored or {})
        counted = allowance.admit(sent, size, now, self._limits)
        return Put(sent_path(sender_id), counted.to_firestore())

    async def _address(self, sender_id: str, target: Target, reader: Reader) -> Address:
        """Where the message goes, judged on the sender's family as stored."""
        membership = Membership.model_validate(await reader.get(membership_path(sender_id)) or {})
        family = None
        if membership.family_id is not None:
            stored_family = await reader.get(family_path(membership.family_id))
            family = None if stored_family is None else Family.model_validate(stored_family)
        copy = None
        if target.conversation_id is not None:
            stored_copy = await reader.get(conversation_path(sender_id, target.conversation_id))
            copy = None if stored_copy is None else Conversation.model_validate(stored_copy)
        return address(family, sender_id, target, copy)

    async def _post(
        self,
        sender_id: str,
        target: Target,
        receipt: str | None,
        asked: str,
        draft: _Draft,
        reader: Reader,
    ) -> tuple[list[Put | Amend], _Posted | Receipt]:
        """The transaction's body: judge, then every copy, the receipt and the sender's
        allowance (with this message counted)."""
        now = draft.at
        kept = await _replayed(sender_id, receipt, asked, now, reader)
        if kept is not None:
            return [], kept
        where = await self._address(sender_id, target, reader)
        message = message_of(
            draft.id, where.author, draft.text, draft.files, draft.via, now, draft.quotes
        )
        counted = await self._counted(sender_id, stored_size(message.to_firestore()), now, reader)
        copies: dict[str, Conversation | None] = {}
        for user_id in where.participants:
            stored = await reader.get(conversation_path(user_id, where.conversation_id))
            copies[user_id] = None if stored is None else Conversation.model_validate(stored)
        made_copies = post(where, copies, message, now)
        writes: list[Put | Amend] = [
            Amend(conversation_path(made.user_id, where.conversation_id), made.before, made.after)
            for made in made_copies
        ]
        if receipt is not None:
            answer = receipt_for(asked, where, message.id, now)
            writes.append(Put(receipt_path(sender_id, receipt), answer.to_firestore()))
        writes.append(counted)
        over = [made.user_id for made in made_copies if made.size > self._budget]
        return writes, _Posted(where, over)

    async def file(self, user_id: str, conversation_id: str, path: str) -> StoredFile:
        """A file that a message in the user's copy of the conversation names (its
        stored file, or a PDF's extracted text), read through the api: how a member
        reads the attachments of a message another member sent.

        The live document is read, then (if it names no such file) the segments the
        file index names for ``path``, newest first: one, in practice, however many
        segments the conversation has (issue 34: every segment was read and parsed).

        Raises:
            NotFound: no message of the user's copy (live or archived) names ``path``,
                or the file is gone.
        """
        conversation = await self._conversations.get(user_id, conversation_id)
        if conversation is None:
            raise NotFound("No conversation with this id.")
        found = _named(conversation.messages, path)
        marker = conversation.archived
        if found is None and marker is not None:
            found = await self._archived(user_id, conversation_id, marker, path)
        if found is None:
            raise NotFound("No message in this conversation has a file at this path.")
        content_type, name = found
        data = await self._attachments.files.read(path, MAX_BYTES)
        return StoredFile(data, content_type, name)

    async def _archived(
        self, user_id: str, conversation_id: str, marker: ArchiveMarker, path: str
    ) -> tuple[str, str] | None:
        """The type and name of the file at ``path`` if a message of a counted segment
        names it, found through the file index (segments the index lists that hold it
        no more, rewritten by a move redone, are passed over)."""
        store = self._conversations
        listed = await store.archived_file(user_id, conversation_id, path)
        for number in sorted(set(listed), reverse=True):
            if number > marker.segments:
                continue  # a move under way: its messages are still live
            segment = await store.segment(user_id, conversation_id, number)
            found = None if segment is None else _named(segment.messages, path)
            if found is not None:
                return found
        if not marker.legacy:
            return None
        return await self._index_legacy(user_id, conversation_id, marker.legacy, path)

    async def _index_legacy(
        self, user_id: str, conversation_id: str, legacy: int, path: str
    ) -> tuple[str, str] | None:
        """Index the ``legacy`` first segments (written before the file index), once,
        then mark the conversation indexed; the file at ``path`` if one names it. The
        segments are read ``_LEGACY_PAGE`` at a time, so memory stays bounded however
        many there are."""
        store = self._conversations
        found: tuple[str, str] | None = None
        for first in range(1, legacy + 1, _LEGACY_PAGE):
            numbers = range(first, min(first + _LEGACY_PAGE, legacy + 1))
            page = await asyncio.gather(
                *(store.segment(user_id, conversation_id, n) for n in numbers)
            )
            for segment in page:
                if segment is None:
                    continue
                await store.index(user_id, segment)
                found = found or _named(segment.messages, path)

        def indexed(conversation: Conversation) -> Conversation:
            marker = conversation.archived
            if marker is None or marker.legacy > legacy:
                return conversation
            return conversation.model_copy(
                update={"archived": marker.model_copy(update={"unindexed": 0})}
            )

        with contextlib.suppress(NotFound):  # deleted meanwhile: nothing to mark
            await store.mutate(user_id, conversation_id, indexed)
        log.info("%s/%s: %d archive segments indexed", user_id, conversation_id, legacy)
        return found


async def _replayed(
    sender_id: str, receipt: str | None, asked: str, now: datetime, reader: Reader
) -> Receipt | None:
    """The receipt of a retry (``None``: a new request), read in the transaction.

    Raises:
        IdempotencyKeyReused: the key answered another request.
    """
    if receipt is None:
        return None
    stored = await reader.get(receipt_path(sender_id, receipt))
    return answered(None if stored is None else Receipt.model_validate(stored), asked, now)


def _named(messages: Sequence[Message], path: str) -> tuple[str, str] | None:
    """The type and name of the file at ``path`` if one of ``messages`` names it."""
    for message in messages:
        for part in message.content:
            ref: FileRef | None = part.file
            if ref is None:
                continue
            name = ref.name or path.rsplit("/", 1)[-1]
            if ref.storage_path == path:
                return ref.content_type, name
            if ref.text_path == path:
                return "text/plain; charset=utf-8", name + ".txt"
    return None
