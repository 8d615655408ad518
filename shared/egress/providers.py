"""The providers' own interfaces, which only the egress holds (DESIGN §13).

Each adapter (``shared/llm/*``, ``shared/voice/*_voice.py``, the scripted fakes)
implements one of these; ``shared/wiring.py`` builds them and gives them to ``Egress``
and to nothing else, and ``tests/unit/test_architecture.py`` fails any other module
that names them. Everything else asks the egress, which screens, meters and bounds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from shared.llm.base import ModelProvider
from shared.llm.moderation import Moderator
from shared.llm.transcribe import Transcriber

__all__ = ["LiveSecret", "ModelProvider", "Moderator", "SecretMinter", "Speaker", "Transcriber"]


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


@dataclass(frozen=True, slots=True)
class LiveSecret:
    """What a provider minted: ``value`` opens one connection until ``expires_at``."""

    value: str
    expires_at: datetime


class SecretMinter(Protocol):
    """One provider's live-audio secrets (``OpenAIVoice``, ``GeminiVoice``,
    ``ScriptedVoice``)."""

    @property
    def provider(self) -> str:
        """``openai`` or ``google``: whom the browser connects to."""
        ...

    @property
    def live_model(self) -> str:
        """The model the secret is for."""
        ...

    async def mint(self, opens_within: timedelta, lasts: timedelta) -> LiveSecret:
        """A single-use secret: a connection must open within ``opens_within``; the
        session may last ``lasts``.

        Raises:
            ProviderError: the provider did not mint one.
        """
        ...
