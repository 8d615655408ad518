"""Spoken replies (DESIGN §9): a finished reply of the agent, read aloud by the
provider, streamed to its owner as it is made and kept in Cloud Storage, so that
hearing it again costs no provider call.

What is read is the reply's text, each visual part's ``description`` in its place
(``spoken_text``). A message's content never changes once it is finished, so the
cache is keyed by the message and the voice (provider, model, voice): a replay is
the stored file, a change of voice makes a new one.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from shared.errors import NotFound, RequestError, VoiceUnavailable
from shared.schemas.documents import Conversation, Message
from shared.store.base import ConversationStore
from shared.store.files import FileStore
from shared.voice.live import OFFLINE

log = logging.getLogger(__name__)

MAX_SPEECH_BYTES = 64 * 1024 * 1024
"""The largest cached reply read back (a long reply is minutes of audio: ~1 MB each)."""

CHARS_PER_TOKEN = 4
"""Speech providers report no usage: a reply's text counts as its tokens (about four
characters each) against the user's daily budget, as if the model had read it."""


class Speaker(Protocol):
    """One provider's text-to-speech (``OpenAIVoice``, ``GeminiVoice``, ``ScriptedVoice``)."""

    @property
    def voice_key(self) -> str:
        """Provider, model and voice: what the audio depends on besides the text."""
        ...

    @property
    def media_type(self) -> str:
        """What ``speak`` streams (``audio/mpeg``, ``audio/wav``)."""
        ...

    def speak(self, text: str) -> AsyncIterator[bytes]:
        """``text`` as audio, chunk by chunk as the provider makes it.

        Raises:
            ProviderError: the provider failed (before or during the stream).
        """
        ...


class SpokenScreen(Protocol):
    """What of a reply may be given to the speech model (``FamilyScreen``: a family
    member's quoted words, once they or the reader opted out, are blanked)."""

    async def spoken(self, user_id: str, conversation: Conversation, text: str) -> str:
        """``text``, a reply of ``conversation``, as the speech model may read it."""
        ...


class SpeechBudget(Protocol):
    """The user's daily tokens (``TaskScheduler``)."""

    async def check_tokens(self, user_id: str) -> None:
        """Raises ``RateLimited`` once today's tokens are spent."""
        ...

    async def spend(self, user_id: str, tokens: int) -> None:
        """Count ``tokens`` against today's."""
        ...


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


def speech_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class Spoken:
    """A reply's audio: ``chunks`` as they come; ``cached``: read from storage (no
    provider call)."""

    media_type: str
    chunks: AsyncIterator[bytes]
    cached: bool


def cache_path(user_id: str, conversation_id: str, message_id: str, voice_key: str) -> str:
    """Where a reply's audio is kept: under the owner's prefix, beside nothing a client
    uploads (``{uid}/uploads/`` is theirs; this is the server's)."""
    voice = hashlib.sha256(voice_key.encode()).hexdigest()[:16]
    return f"{user_id}/speech/{conversation_id}/{message_id}-{voice}"


class SpokenReplies:
    """Reads the agent's replies aloud for their owners."""

    def __init__(
        self,
        speaker: Speaker | None,
        store: ConversationStore,
        files: FileStore,
        budget: SpeechBudget,
        screen: SpokenScreen | None = None,
    ) -> None:
        self._speaker = speaker
        self._store = store
        self._files = files
        self._budget = budget
        self._screen = screen

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
        speaker = self._speaker
        if speaker is None:
            raise VoiceUnavailable(OFFLINE)
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
        path = cache_path(user_id, conversation_id, message_id, speaker.voice_key)
        if await self._files.stat(path) is not None:
            data = await self._files.read(path, MAX_SPEECH_BYTES)
            return Spoken(speaker.media_type, _once(data), cached=True)
        await self._budget.check_tokens(user_id)
        if self._screen is not None:
            # Screened when the provider is asked, never before: an opt-out holds from
            # the next reading on. (Audio kept from before it is replayed: that gives
            # no model anything.)
            text = await self._screen.spoken(user_id, conversation, text)
        made = self._made(speaker, user_id, text, path)
        # The first chunk before any answer: a provider that fails at once is an error
        # answer (502/503), not a 200 whose audio stops before it starts.
        try:
            first = await anext(made)
        except StopAsyncIteration:
            first = b""
        return Spoken(speaker.media_type, _after(first, made), cached=False)

    async def _made(
        self, speaker: Speaker, user_id: str, text: str, path: str
    ) -> AsyncIterator[bytes]:
        """The provider's audio, passed on as it comes; once whole, kept and counted. A
        stream cut short (the provider failed, the listener left) is neither."""
        audio = bytearray()
        async for chunk in speaker.speak(text):
            audio += chunk
            yield chunk
        try:
            await self._files.write(path, bytes(audio), speaker.media_type)
        except Exception:  # the next request makes it again
            log.warning("speech %s: not cached", path, exc_info=True)
        try:
            await self._budget.spend(user_id, speech_tokens(text))
        except Exception:
            log.warning("speech %s: its tokens were not counted", path, exc_info=True)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _after(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk
