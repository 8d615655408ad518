"""Transcribing a voice clip: one small interface (``Transcriber``) and its fake.

An adapter streams what it hears as ``TextDelta`` pieces (when its provider streams)
and always ends with one ``Transcribed``: the whole text, and what it cost. The
adapters live beside their chat adapters, the only modules that import each SDK:
OpenAI's ``audio.transcriptions`` (``openai.OpenAITranscriber``) and Gemini's audio
input with an instruction to transcribe (``gemini.GeminiTranscriber``). Anthropic's
models take no audio, so a deployment on Anthropic transcribes with one of those
(``SPARK_TRANSCRIBE_MODEL``). With no provider at all there is no transcriber, and
voice is refused plainly rather than answered with invented words.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from shared.llm.base import TextDelta
from shared.schemas.documents import Usage

TRANSCRIBE_INSTRUCTION = (
    "Transcribe this audio clip exactly as spoken, in the language spoken. Reply with "
    "the transcript only: no notes, no quotation marks, no description of sounds. If "
    "no words are spoken, reply with nothing at all."
)
"""What a chat model that hears audio (Gemini) is told to do with a clip."""

AUDIO_TOKENS_PER_SECOND = 10
"""What a second of audio costs in tokens when a provider does not say (OpenAI counts
audio input at one token per 100 ms); only used to charge the user's day."""


def estimated_usage(seconds: float) -> Usage:
    """The tokens charged for ``seconds`` of audio whose cost was not reported."""
    return Usage(input_tokens=math.ceil(seconds * AUDIO_TOKENS_PER_SECOND), output_tokens=0)


@dataclass(frozen=True, slots=True)
class Clip:
    """A voice clip to transcribe: its bytes, their (sniffed) type, a file name for
    providers that want one, its length as decoded, and its sound as decoded (16 kHz
    mono 16-bit WAV: at most 3.8 MB for 120 s) for providers that take few types."""

    data: bytes
    media_type: str
    name: str
    duration_seconds: float
    wav: bytes = b""


@dataclass(frozen=True, slots=True)
class Transcribed:
    """The transcription is over: the whole text (stripped; empty when nothing was
    heard) and what it cost."""

    text: str
    usage: Usage = field(default_factory=Usage)
    type: Literal["transcribed"] = "transcribed"


TranscriptionEvent = TextDelta | Transcribed


class Transcriber(Protocol):
    """A model that turns speech into text."""

    @property
    def label(self) -> str:
        """The model's name, e.g. ``gpt-4o-mini-transcribe``."""
        ...

    def transcribe(self, clip: Clip) -> AsyncGenerator[TranscriptionEvent, None]:
        """What ``clip`` says, as pieces while they come, then one ``Transcribed``.

        Raises:
            ProviderError: the provider failed or refused.
        """
        ...


class FakeTranscriber:
    """Hears what it is told to (tests): ``heard`` is the text, or a function of the
    clip giving it; it is streamed a word at a time."""

    def __init__(self, heard: str | Callable[[Clip], str] = "Hello Spark AI Agent") -> None:
        self._heard = heard
        self.clips: list[Clip] = []

    @property
    def label(self) -> str:
        return "fake-transcriber"

    async def transcribe(self, clip: Clip) -> AsyncGenerator[TranscriptionEvent, None]:
        self.clips.append(clip)
        text = self._heard if isinstance(self._heard, str) else self._heard(clip)
        words = text.split(" ")
        for n, word in enumerate(words):
            if word or n:
                yield TextDelta(word if n == 0 else " " + word)
        yield Transcribed(text.strip(), estimated_usage(clip.duration_seconds))
