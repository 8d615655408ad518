"""``ScriptedVoice``: the audio provider of unit tests and local runs without a key for
it, shipped with the package like ``ScriptedProvider``. It records each call, so a
test can see that a replay cost none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta

from shared.clock import Clock
from shared.egress.providers import LiveSecret
from shared.errors import ProviderUnavailable


class ScriptedVoice:
    """Mints ``secret-1``, ``secret-2``… and speaks each text as ``chunks`` bytes
    (``fail``: every call fails as a provider outage would)."""

    provider = "openai"
    live_model = "scripted-transcribe"
    voice_key = "scripted:scripted-tts:default"
    media_type = "audio/mpeg"

    def __init__(self, clock: Clock, chunks: int = 3, fail: bool = False) -> None:
        self._clock = clock
        self._chunks = chunks
        self.fail = fail
        self.minted: list[tuple[timedelta, timedelta]] = []
        self.spoken: list[str] = []

    async def mint(self, opens_within: timedelta, lasts: timedelta) -> LiveSecret:
        self.minted.append((opens_within, lasts))
        if self.fail:
            raise ProviderUnavailable("The audio provider is having trouble; please try again.")
        expires: datetime = self._clock.now() + opens_within
        return LiveSecret(f"secret-{len(self.minted)}", expires)

    async def speak(self, text: str) -> AsyncIterator[bytes]:
        self.spoken.append(text)
        if self.fail:
            raise ProviderUnavailable("The audio provider is having trouble; please try again.")
        for n in range(self._chunks):
            yield f"[{n}:{text[:20]}]".encode()
