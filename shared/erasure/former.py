"""What stays of an erased member: their messages in the others' ``direct`` and
``family`` copies, marked ``author.deleted`` (pure changes, run inside the store's
atomic writes; marking again changes nothing)."""

from __future__ import annotations

from collections.abc import Sequence

from shared.schemas.documents import ArchiveSegment, Conversation, Message

SHARED_KINDS = ("direct", "family")


def _marked(messages: Sequence[Message], user_id: str) -> list[Message] | None:
    """``messages`` with each of ``user_id``'s marked as by a deleted author; ``None``
    when none needed it (nothing to write)."""
    changed = False
    out: list[Message] = []
    for message in messages:
        author = message.author
        if author is not None and author.user_id == user_id and not author.deleted:
            message = message.model_copy(
                update={"author": author.model_copy(update={"deleted": True})}
            )
            changed = True
        out.append(message)
    return out if changed else None


def mark_conversation(conversation: Conversation, user_id: str) -> Conversation:
    """The copy with ``user_id``'s messages (finished and queued) marked."""
    update: dict[str, object] = {}
    if (messages := _marked(conversation.messages, user_id)) is not None:
        update["messages"] = messages
    queued = conversation.queued_messages
    if queued and (marked := _marked(queued, user_id)) is not None:
        update["queued_messages"] = marked
    return conversation.model_copy(update=update) if update else conversation


def mark_segment(segment: ArchiveSegment, user_id: str) -> ArchiveSegment | None:
    """The segment with ``user_id``'s messages marked; ``None`` if none needed it."""
    messages = _marked(segment.messages, user_id)
    return None if messages is None else segment.model_copy(update={"messages": messages})


def others_of(conversation: Conversation, user_id: str) -> list[str]:
    """The other members whose copies of a shared conversation hold what ``user_id``
    wrote there (none for the user's own agent conversations)."""
    if conversation.kind not in SHARED_KINDS:
        return []
    return [uid for uid in conversation.participant_ids if uid != user_id]
