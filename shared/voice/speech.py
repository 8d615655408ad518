"""Spoken replies (DESIGN §9): a finished reply of the agent, read aloud by the
provider, streamed to its owner as it is made and kept in Cloud Storage, so that
hearing it again costs no provider call.

What is read is the reply's text, each visual part's ``description`` in its place
(``spoken_text``). A message's content never changes once it is finished, so the
cache is keyed by the message and the voice (provider, model, voice): a replay is
the stored file, a change of voice makes a new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from shared.egress.gate import Egress
from shared.errors import NotFound, RequestError, VoiceUnavailable
from shared.schemas.documents import Message
from shared.store.base import ConversationStore
from shared.store.files import FileStore
from shared.voice.live import OFFLINE

log = logging.getLogger(__name__)

MAX_SPEECH_BYTES = 64 * 1024 * 1024
"""The largest cached reply read back (a long reply is minutes of audio: ~1 MB each)."""


def spoken_text(message: Message) -> str:
    """What is read of ``message``: its text, and each visual part's description in its
    place. A tool call whose result is in the message is left to its result (which says
    what it made); hidden results are not read."""
    answered = {p.tool_result.tool_call_id for p in message.content if p.tool_result}
    pieces: list[str] = []
    for part in message.content:
        if part.type == "text":
            pieces.append(part.text or "")
        elif (part.tool_call is not None and part.tool_call.id in answered) or (
            part.tool_result is not None and part.tool_result.hidden
        ):
            continue
        else:
            pieces.append(part.description or "")
    return "\n\n".join(piece.strip() for piece in pieces if piece.strip())


_BREAKS = ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ")


def pieces(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, each cut at the last
    paragraph, line, sentence, clause or word break that keeps it within the limit."""
    found: list[str] = []
    while len(text) > limit:
        window = text[:limit]
        cut = next((window.rfind(b) + len(b) for b in _BREAKS if window.rfind(b) > 0), limit)
        found.append(text[:cut].strip())
        text = text[cut:]
    if text.strip():
        found.append(text.strip())
    return [piece for piece in found if piece]


@dataclass(frozen=True, slots=True)
class Spoken:
    """A reply's audio: ``chunks`` as they come; ``cached``: read from storage (no
    provider call)."""

    media_type: str
    chunks: AsyncIterator[bytes]
    cached: bool


def speech_prefix(user_id: str, conversation_id: str) -> str:
    """Where the audio of a conversation's replies is kept (its delete empties it)."""
    return f"{user_id}/speech/{conversation_id}/"


def cache_path(user_id: str, conversation_id: str, message_id: str, voice_key: str) -> str:
    """Where a reply's audio is kept: under the owner's prefix, beside nothing a client
    uploads (``{uid}/uploads/`` is theirs; this is the server's)."""
    voice = hashlib.sha256(voice_key.encode()).hexdigest()[:16]
    return f"{speech_prefix(user_id, conversation_id)}{message_id}-{voice}"


class SpokenReplies:
    """Reads the agent's replies aloud for their owners, through the egress (which
    screens the text, reserves its tokens before the provider is asked and charges
    them however the stream ends)."""

    def __init__(self, egress: Egress, store: ConversationStore, files: FileStore) -> None:
        self._egress = egress
        self._store = store
        self._files = files

    async def speak(self, user_id: str, conversation_id: str, message_id: str) -> Spoken:
        """The reply ``message_id`` as audio: from the cache, or from the provider (and
        kept once it was made whole).

        Raises:
            VoiceUnavailable: no audio provider (offline).
            NotFound: no such conversation of the user's, or no finished message with
                this id in it.
            RequestError: the message is not the agent's reply, or has nothing to read.
            RateLimited: (not cached) today's tokens are spent.
        """
        speaker = self._egress.speaker
        if speaker is None:
            raise VoiceUnavailable(OFFLINE)
        voice_key, media_type = speaker
        conversation = await self._store.get(user_id, conversation_id)
        if conversation is None:
            raise NotFound("No conversation with this id.")
        message = conversation.message(message_id)
        if message is None:
            raise NotFound("No finished message with this messageId in this conversation.")
        if message.role != "assistant":
            raise RequestError("Only Spark AI Agent's replies can be read aloud.")
        text = spoken_text(message)
        if not text:
            raise RequestError("This reply has nothing to read aloud.")
        path = cache_path(user_id, conversation_id, message_id, voice_key)
        if await self._files.stat(path) is not None:
            # Audio kept from before an opt-out is replayed: that gives no model anything.
            data = await self._files.read(path, MAX_SPEECH_BYTES)
            return Spoken(media_type, _once(data), cached=True)
        made = self._made(user_id, conversation_id, text, path, media_type)
        # The first chunk before any answer: a provider that fails at once (or a day's
        # tokens spent) is an error answer, not a 200 whose audio stops before it starts.
        try:
            first = await anext(made)
        except StopAsyncIteration:
            first = b""
        return Spoken(media_type, _after(first, made), cached=False)

    async def _made(
        self, user_id: str, conversation_id: str, text: str, path: str, media_type: str
    ) -> AsyncGenerator[bytes, None]:
        """The provider's audio, passed on as it comes; once whole, kept. A stream cut
        short (the provider failed, the listener left) is not kept."""
        audio = bytearray()
        async with contextlib.aclosing(self._egress.speak(user_id, text)) as made:
            async for chunk in made:
                audio += chunk
                yield chunk
        try:
            await self._files.write(path, bytes(audio), media_type)
            # Storage has no precondition on a Firestore document: read afresh after the
            # write instead. A delete removes the document before the audio, so either
            # its sweep finds this file, or this read finds the conversation gone.
            if await self._store.get(user_id, conversation_id) is None:
                await self._files.delete([path])
        except Exception:  # the next request makes it again
            log.warning("speech %s: not cached", path, exc_info=True)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _after(first: bytes, rest: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    async with contextlib.aclosing(rest):  # a listener who leaves ends the provider's call
        if first:
            yield first
        async for chunk in rest:
            yield chunk
