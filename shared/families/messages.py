"""Verbatim messages between family members (DESIGN §8), as pure decisions on what one
delivery's transaction read: who gets the message (``address``), every member's copy
of the shared conversation with it appended (``post``), and the receipt a retry finds
(``receipt_for``). ``shared/families/delivery.py`` does the reading and writing.

A shared conversation has one id for all its copies, derived from what it is for, so
every member's copy is found without a query and two first messages racing create the
same one:

* ``direct``: ``dm_`` + a hash of the family and the pair (either member's message
  finds it), in each of the two subtrees;
* ``family``: ``fc_`` + a hash of the family, in each current member's subtree.

Agent conversations have ``conv_`` ids, so the id alone says which kind a
``conversationId`` names. A member who leaves keeps their copies (their history) but is
no longer addressed: nothing more is delivered to or from them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.errors import (
    IdempotencyKeyReused,
    MemberNotFound,
    NoFamily,
    NotFound,
    RequestError,
    StoreError,
)
from shared.families.membership import NO_MEMBER
from shared.ids import derived
from shared.schemas.documents import (
    Author,
    ContentPart,
    Conversation,
    ConversationKind,
    Message,
)
from shared.schemas.server import Family, Receipt
from shared.store.limits import CLOSING_RESERVE, check_size
from shared.store.patch import Sizes

DIRECT_PREFIX = "dm_"
FAMILY_PREFIX = "fc_"
# How long a retry with the same Idempotency-Key gets the first answer back.
RECEIPT_LIFETIME = timedelta(hours=24)

NO_CONVERSATION = "No conversation with this id."
NOT_IN_A_FAMILY = (
    "You do not belong to a family, so there is nobody to send this to. Create a family, "
    "or ask a parent in one for an invite link."
)


def is_shared(conversation_id: str) -> bool:
    """Whether ``conversation_id`` names a conversation between family members."""
    return conversation_id.startswith((DIRECT_PREFIX, FAMILY_PREFIX))


def direct_id(family_id: str, one: str, other: str) -> str:
    """The id of the ``direct`` conversation of two members of a family."""
    low, high = sorted((one, other))
    return derived(DIRECT_PREFIX.rstrip("_"), family_id, low, high)


def family_conversation_id(family_id: str) -> str:
    """The id of a family's ``family`` conversation."""
    return derived(FAMILY_PREFIX.rstrip("_"), family_id)


@dataclass(frozen=True, slots=True)
class Target:
    """Whom a message is for: one member (``user_id``), the whole family (``family``),
    or the people of an existing shared conversation (``conversation_id``); exactly
    one of them."""

    user_id: str | None = None
    family: bool = False
    conversation_id: str | None = None

    def __post_init__(self) -> None:
        given = (self.user_id is not None) + self.family + (self.conversation_id is not None)
        if given != 1:
            raise ValueError("a Target names exactly one of user_id, family, conversation_id")

    def key(self) -> str:
        """The target as a fingerprint sees it."""
        if self.user_id is not None:
            return f"user:{self.user_id}"
        return "family" if self.family else f"conversation:{self.conversation_id}"


@dataclass(frozen=True, slots=True)
class Address:
    """Where one message goes: the shared conversation, and every member who gets a
    copy of it (the sender first), as the transaction judged them."""

    conversation_id: str
    kind: ConversationKind
    family_id: str
    participants: tuple[str, ...]
    author: Author

    @property
    def recipients(self) -> list[str]:
        """Those who get the message: every participant but its author."""
        return [uid for uid in self.participants if uid != self.author.user_id]


def _sender(family: Family | None, sender_id: str) -> Family:
    if family is None or family.member(sender_id) is None:
        raise NoFamily(NOT_IN_A_FAMILY)
    return family


def address(
    family: Family | None, sender_id: str, target: Target, copy: Conversation | None = None
) -> Address:
    """Where a message from ``sender_id`` to ``target`` goes, in the sender's current
    ``family``; ``copy`` is the sender's copy of ``target.conversation_id`` (if named).

    Raises:
        NoFamily: the sender belongs to no family.
        RequestError: the sender named themself.
        MemberNotFound: the member named is not in the sender's family (never was, or
            has left).
        NotFound: the conversation named is not one of the sender's shared
            conversations in their current family, or its other member has left.
    """
    if target.conversation_id is not None:
        if copy is None or copy.kind == "agent" or not is_shared(copy.id):
            raise NotFound(NO_CONVERSATION)
        family = _sender(family, sender_id)
        if copy.family_id != family.id or sender_id not in copy.participant_ids:
            raise NotFound(NO_CONVERSATION)  # a conversation of a family they have left
        if copy.kind == "family":
            target = Target(family=True)
        else:
            others = [uid for uid in copy.participant_ids if uid != sender_id]
            if len(others) != 1 or family.member(others[0]) is None:
                raise NotFound(NO_CONVERSATION)  # the other member has left
            target = Target(user_id=others[0])
    family = _sender(family, sender_id)
    me = family.member(sender_id)
    assert me is not None  # _sender checked
    author = Author(user_id=sender_id, display_name=me.display_name, role=me.role)
    if target.family:
        everyone = (sender_id, *(m.user_id for m in family.members if m.user_id != sender_id))
        return Address(family_conversation_id(family.id), "family", family.id, everyone, author)
    assert target.user_id is not None  # a Target names one
    if target.user_id == sender_id:
        raise RequestError(
            "You cannot send a message to yourself. Name another member of your family, "
            'or send "targetFamily": true to write to everyone.'
        )
    if family.member(target.user_id) is None:
        raise MemberNotFound(NO_MEMBER)
    pair = (sender_id, target.user_id)
    return Address(direct_id(family.id, *pair), "direct", family.id, pair, author)


def fingerprint(target: Target, text: str, files: Sequence[str]) -> str:
    """What a request asked, as a receipt keeps it (SHA-256 of the target, the text and
    the attachments' paths): a retry must ask the same."""
    asked = json.dumps([target.key(), text, list(files)], ensure_ascii=False)
    return hashlib.sha256(asked.encode("utf-8")).hexdigest()


def receipt_id(idempotency_key: str) -> str:
    """The id of the receipt of an ``Idempotency-Key`` (its SHA-256, hex)."""
    return hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()


def answered(stored: Receipt | None, asked: str, now: datetime) -> Receipt | None:
    """The receipt a retry gets back (``None``: there is none, or it has expired: the
    request is a new one).

    Raises:
        IdempotencyKeyReused: the key answered another request within its lifetime.
    """
    if stored is None or stored.expires_at <= now:
        return None
    if stored.fingerprint != asked:
        raise IdempotencyKeyReused(
            "This Idempotency-Key was already used for a different message in the last "
            "24 hours. Use a new key for each new message, and the same key only to retry."
        )
    return stored


def message_of(
    message_id: str,
    author: Author,
    text: str,
    files: Sequence[ContentPart],
    via: str,
    now: datetime,
    quotes: Sequence[str] = (),
) -> Message:
    """The message every copy holds, identical in each."""
    return Message.model_validate(
        {
            "id": message_id,
            "role": "user",
            "author": author,
            "created_at": now,
            "status": "complete",
            "content": [ContentPart.of_text(text), *files],
            "via": via,
            "quotes": sorted(quotes) or None,
        }
    )


@dataclass(frozen=True, slots=True)
class Copy:
    """One member's copy of the conversation after the message: ``before`` as read
    (``None``: created by this delivery), and its stored size after."""

    user_id: str
    before: Conversation | None
    after: Conversation
    size: int


def post(
    address: Address, copies: Mapping[str, Conversation | None], message: Message, now: datetime
) -> list[Copy]:
    """Every participant's copy with ``message`` appended (a copy made for whoever has
    none yet), each within the document limit with the room kept for closing.

    Raises:
        ConversationTooLarge: a copy would not fit (nothing is written).
        StoreError: a copy with this id is not a shared conversation (never, in practice).
    """
    made: list[Copy] = []
    participants = list(address.participants)
    for uid in address.participants:
        before = copies.get(uid)
        if before is None:
            after = Conversation(
                id=address.conversation_id,
                kind=address.kind,
                participant_ids=participants,
                family_id=address.family_id,
                created_at=now,
                updated_at=now,
                last_message_at=now,
                messages=[message],
            )
            size = Sizes.of(after.to_firestore()).total
            check_size(size, CLOSING_RESERVE)
        else:
            if before.kind != address.kind or before.family_id != address.family_id:
                raise StoreError(
                    f"conversation {before.id} of {uid} is not this {address.kind} conversation"
                )
            after = before.model_copy(
                update={
                    "messages": [*before.messages, message],
                    "participant_ids": participants,
                    "updated_at": now,
                    "last_message_at": now,
                }
            )
            size = Sizes.of(after.to_firestore()).total
            check_size(size, CLOSING_RESERVE, Sizes.of(before.to_firestore()).total)
        made.append(Copy(uid, before, after, size))
    return made


def receipt_for(asked: str, address: Address, message_id: str, now: datetime) -> Receipt:
    """The receipt written with the delivery."""
    return Receipt(
        fingerprint=asked,
        conversation_id=address.conversation_id,
        message_id=message_id,
        recipients=address.recipients,
        created_at=now,
        expires_at=now + RECEIPT_LIFETIME,
    )
