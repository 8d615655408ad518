"""One conversation of an export, as JSON and as Markdown, streamed a message at a time.

A conversation's older messages live in archive segments (``shared/store/archive.py``):
the live document is read first, and its marker (``archived.segments``) names the
segments that hold the messages before its own, each read in turn when the stream
reaches it. A segment a move wrote but never counted (it died half-way) is not read, so
each message is written once, in order: the segments' messages, the live document's,
then a reply being written now (``activeRun.message``). At most one segment (under
1 MiB) and the live document are held at once, whatever the conversation's length.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import datetime

from shared.schemas.documents import ContentPart, Conversation, Message
from shared.store.base import ConversationStore

# The conversation's own fields an export gives (the run machinery, claims and the
# provider's opaque state are not the person's data).
_FIELDS = {"id", "kind", "title", "family_id", "created_at", "updated_at", "last_message_at"}


async def messages_of(
    store: ConversationStore, user_id: str, conversation: Conversation
) -> AsyncIterator[Message]:
    """Every message of the user's copy of ``conversation`` (read already), oldest first:
    the archive's (one segment read at a time), the live document's, then the reply
    being written, if any. A segment the marker counts but the store lost is skipped."""
    marker = conversation.archived
    for number in range(1, (marker.segments if marker else 0) + 1):
        segment = await store.segment(user_id, conversation.id, number)
        if segment is not None:
            for message in segment.messages:
                yield message
    for message in conversation.messages:
        yield message
    run = conversation.active_run
    if run is not None and run.message is not None:
        yield run.message
    for message in conversation.queued_messages or ():
        yield message


def _message_json(message: Message) -> str:
    return json.dumps(
        message.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude={"provider_state"}
        ),
        ensure_ascii=False,
    )


async def as_json(
    store: ConversationStore, user_id: str, conversation: Conversation
) -> AsyncIterator[bytes]:
    """``conversations/{id}.json``: the conversation's fields and ``messages``, each
    message as stored (without the provider's opaque state), archive merged, in order."""
    head = conversation.model_dump(mode="json", by_alias=True, exclude_none=True, include=_FIELDS)
    opening = json.dumps(head, ensure_ascii=False, indent=1)[:-2]
    yield f'{opening},\n "messages": [\n'.encode()
    first = True
    async for message in messages_of(store, user_id, conversation):
        yield ((" " if first else ",\n ") + _message_json(message)).encode()
        first = False
    yield b"\n ]\n}\n"


async def as_markdown(
    store: ConversationStore, user_id: str, conversation: Conversation
) -> AsyncIterator[bytes]:
    """``conversations/{id}.md``: the conversation to read, a heading per message."""
    title = conversation.title or f"Conversation {conversation.id}"
    yield (
        f"# {title}\n\n"
        f"A {conversation.kind} conversation, started {_when(conversation.created_at)}.\n"
    ).encode()
    async for message in messages_of(store, user_id, conversation):
        yield "".join(_markdown(message, user_id)).encode()


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _speaker(message: Message, user_id: str) -> str:
    if message.role == "assistant":
        return "Spark AI Agent"
    if message.role == "tool":
        return "A tool's result"
    if message.role == "system":
        return "Spark AI Agent's note"
    author = message.author
    if author is None or author.user_id == user_id:
        return "You"
    return author.display_name or "A family member"


def _markdown(message: Message, user_id: str) -> Iterator[str]:
    yield f"\n## {_speaker(message, user_id)} · {_when(message.created_at)}\n\n"
    for part in message.content:
        yield from _part(part)
    if message.status not in ("complete", "waiting"):
        yield f"_({message.status})_\n\n"


def _part(part: ContentPart) -> Iterator[str]:
    if part.text is not None:
        yield part.text.rstrip() + "\n\n"
    elif part.file is not None:
        name = part.file.name or part.file.storage_path.rsplit("/", 1)[-1]
        yield f"_File: {name}_ ({part.file.content_type})\n\n"
    elif part.tool_call is not None:
        yield f"_{part.tool_call.display_text}_ (`{part.tool_call.name}`)\n\n"
    elif part.tool_result is not None and not part.tool_result.hidden:
        yield f"_Result: {part.tool_result.status}_\n\n"


def size_bound(conversation: Conversation) -> int:
    """More bytes than either form of the conversation can take: each document (the
    live one and every segment) is under Firestore's 1 MiB, and written out it grows by
    no more than four times (escapes, indentation, the Markdown's headings)."""
    marker = conversation.archived
    return ((marker.segments if marker else 0) + 1) * 4 * 1024 * 1024
