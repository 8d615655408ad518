"""Push-to-talk: a message's voice clip checked, read and transcribed (DESIGN §9).

Three steps, as for attachments (``service.py``), so that a refused send costs no
download and no provider call. ``VoiceClips.check`` judges what can be judged without
reading the clip (a provider to transcribe with, the path, its size, its type from its
first bytes). ``listen`` reads it and decodes it in a child process with its memory
and CPU capped (``audio_worker.decode``), ``decodes_at_once`` at a time in a process (the
others wait their turn, unread): its real type and length, and whether anything in it
is loud enough to be speech. ``transcribe`` asks the provider, passing each piece on as
it comes, and charges what it cost to the user's day. A clip in which nothing is heard,
by the decoder or by the provider, is refused with ``NO_SPEECH``: never an empty message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from shared.attachment_rules import (
    AUDIO,
    MAX_BYTES,
    SNIFF_BYTES,
    file_name,
    path_problem,
    size_text,
    sniff,
)
from shared.attachments.audio import NotAudio, Sound, TooLong
from shared.attachments.audio_worker import decode
from shared.egress.gate import Egress
from shared.errors import (
    Forbidden,
    NoSpeech,
    NotFound,
    PayloadTooLarge,
    UnsupportedMediaType,
    VoiceUnavailable,
)
from shared.llm.base import TextDelta
from shared.llm.transcribe import Clip, Transcribed
from shared.schemas.documents import ContentPart, FileRef
from shared.store.files import FileInfo, FileStore

NO_SPEECH = "I couldn't hear anything — try again."
NO_PROVIDER = (
    "Voice messages need a transcription provider, and this Spark AI Agent has none "
    "configured (it runs offline); type your message instead."
)


class Listener(Protocol):
    """Told each piece of the transcript as it comes, then the whole (``final``)."""

    def __call__(self, text: str, *, final: bool) -> None: ...


@dataclass(frozen=True, slots=True)
class CheckedClip:
    """A voice clip that met every rule judged without reading it."""

    info: FileInfo
    media_type: str


@dataclass(frozen=True, slots=True)
class Listened:
    """A clip read and decoded: what goes to the transcriber, and the message's part."""

    clip: Clip
    part: ContentPart


def _label(info: FileInfo | None, path: str) -> str:
    return f"The voice clip {(info.name if info else None) or file_name(path)!r}"


class VoiceClips:
    """Checks, reads and transcribes voice clips from one ``FileStore``, through the
    egress; without a transcription model there (offline) every clip is refused
    plainly."""

    def __init__(
        self,
        files: FileStore,
        egress: Egress,
        max_seconds: int,
        decodes_at_once: int = 1,
    ) -> None:
        self.files = files
        self.egress = egress
        self.max_seconds = max_seconds
        self._decodes = asyncio.Semaphore(decodes_at_once)

    async def check(self, user_id: str, path: str) -> CheckedClip:
        """Every rule that needs no download.

        Raises:
            VoiceUnavailable: no provider to transcribe with.
            Forbidden: a path outside the sender's ``{uid}/uploads/``.
            NotFound: no file there.
            PayloadTooLarge: over 25 MB.
            UnsupportedMediaType: its first bytes are no audio type we take.
        """
        if not self.egress.transcribes:
            raise VoiceUnavailable(NO_PROVIDER)
        problem = path_problem(user_id, path)
        if problem is not None:
            raise Forbidden(f"{_label(None, path)} cannot be used: {problem}.")
        info = await self.files.stat(path)
        if info is None:
            raise NotFound(f"{_label(None, path)} was not found; upload it again.")
        label = _label(info, path)
        if info.size_bytes > MAX_BYTES:
            raise PayloadTooLarge(
                f"{label} is {size_text(info.size_bytes)}; voice clips can be at most "
                f"{size_text(MAX_BYTES)}."
            )
        real = sniff(await self.files.head(path, SNIFF_BYTES))
        if real not in AUDIO:
            raise UnsupportedMediaType(
                f"{label} is not a voice clip (WebM or Ogg Opus, MP3, M4A or WAV), judged "
                "by its contents."
            )
        return CheckedClip(info, real)

    async def listen(self, checked: CheckedClip) -> Listened:
        """The clip read and decoded (in a child process, ``decodes_at_once`` at a time
        per process; the others wait, holding nothing).

        Raises:
            UnsupportedMediaType: it cannot be decoded as audio.
            PayloadTooLarge: longer than ``max_seconds``.
            NoSpeech: nothing in it is loud enough to be speech.
        """
        info = checked.info
        label = _label(info, info.path)
        async with self._decodes:
            data = await self.files.read(info.path, MAX_BYTES)
            try:
                sound: Sound = await decode(data, self.max_seconds)
            except NotAudio:
                raise UnsupportedMediaType(
                    f"{label} could not be played as audio; it may be damaged or not a "
                    "voice clip at all."
                ) from None
            except TooLong:
                raise PayloadTooLarge(
                    f"{label} is longer than {self.max_seconds} seconds; voice clips can be "
                    f"at most {self.max_seconds} seconds long."
                ) from None
        if sound.silent:
            raise NoSpeech(NO_SPEECH)
        name = info.name or file_name(info.path)
        seconds = round(sound.duration_seconds, 2)
        clip = Clip(data, checked.media_type, file_name(info.path), seconds, sound.wav)
        ref = FileRef(
            storage_path=info.path,
            content_type=checked.media_type,
            size_bytes=info.size_bytes,
            name=name,
            duration_seconds=seconds,
        )
        return Listened(clip, ContentPart(type="file", file=ref))

    async def transcribe(self, user_id: str, clip: Clip, listener: Listener | None) -> str:
        """What ``clip`` says (each piece told to ``listener`` as it comes), charged
        to ``user_id``'s day however it ends (the egress meters it).

        Raises:
            VoiceUnavailable: no provider to transcribe with.
            NoSpeech: the provider heard no words.
            ProviderError: the provider failed.
        """
        if not self.egress.transcribes:
            raise VoiceUnavailable(NO_PROVIDER)
        done: Transcribed | None = None
        async for event in self.egress.transcribe(user_id, clip):
            if isinstance(event, TextDelta):
                if listener is not None and event.text:
                    listener(event.text, final=False)
            else:
                done = event
        assert done is not None  # every transcriber ends with one
        text = done.text.strip()
        if not text:
            raise NoSpeech(NO_SPEECH)
        if listener is not None:
            listener(text, final=True)
        return text
