"""Live-audio secrets and spoken replies on OpenAI (the ``openai`` SDK).

A live session is a Realtime *transcription* session: the browser streams the
microphone to OpenAI with the client secret minted here, and gets each utterance's
transcript back (it never gets a reply from the Realtime model: the agent replies).
Spoken replies are ``audio.speech``, streamed as MP3 as it is made.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.egress.providers import LiveSecret
from shared.llm.openai import SdkClient, connect_client, sdk_failures, translate_error
from shared.voice.speech import pieces

MAX_INPUT = 4096
"""The most characters ``audio.speech`` reads in one request."""

DEFAULT_VOICE = "fable"
"""OpenAI's voice with a British accent (the product speaks UK English)."""

INSTRUCTIONS = "Speak in a warm, clear British English voice, at a calm pace for a learner."

# A secret opens a connection within 10 s to 2 h of being minted (OpenAI's bounds).
_SECONDS = (10, 7200)


def _transcription_session(model: str) -> dict[str, Any]:
    return {
        "type": "transcription",
        "audio": {
            "input": {
                "transcription": {"model": model, "language": "en"},
                "turn_detection": {"type": "server_vad"},
                "noise_reduction": {"type": "near_field"},
            }
        },
    }


class OpenAIVoice:
    """``SecretMinter`` and ``Speaker`` on one ``AsyncOpenAI`` client (made, and the
    SDK imported, when first used)."""

    provider = "openai"
    media_type = "audio/mpeg"

    def __init__(self, client: SdkClient, live_model: str, speech_model: str, voice: str) -> None:
        self._client = client
        self._live_model = live_model
        self._speech_model = speech_model
        self._voice = voice or DEFAULT_VOICE

    @classmethod
    def connect(
        cls,
        api_key: str | None,
        base_url: str | None,
        live_model: str,
        speech_model: str,
        voice: str = "",
    ) -> OpenAIVoice:
        client = connect_client(api_key, base_url, max_retries=2)
        return cls(client, live_model, speech_model, voice)

    @property
    def live_model(self) -> str:
        return self._live_model

    @property
    def voice_key(self) -> str:
        return f"openai:{self._speech_model}:{self._voice}"

    async def mint(self, opens_within: timedelta, lasts: timedelta) -> LiveSecret:
        """``POST /v1/realtime/client_secrets`` for a transcription session. OpenAI ends
        a session at its own limit; ``lasts`` bounds only what we accept from it."""
        low, high = _SECONDS
        seconds = min(max(int(opens_within.total_seconds()), low), high)
        try:
            made = await self._client.sdk.realtime.client_secrets.create(
                expires_after={"anchor": "created_at", "seconds": seconds},
                session=_transcription_session(self._live_model),  # type: ignore[arg-type]
            )
        except sdk_failures() as exc:
            raise translate_error(exc) from exc
        return LiveSecret(made.value, datetime.fromtimestamp(made.expires_at, UTC))

    async def speak(self, text: str) -> AsyncIterator[bytes]:
        """``POST /v1/audio/speech``, its MP3 passed on chunk by chunk."""
        options: dict[str, Any] = {}
        if self._speech_model.startswith("gpt-4o"):  # older models take no instructions
            options["instructions"] = INSTRUCTIONS
        try:
            # One request per piece of at most MAX_INPUT characters; MP3 frames follow
            # one another, so the pieces' audio is one file.
            for piece in pieces(text, MAX_INPUT):
                async with self._client.sdk.audio.speech.with_streaming_response.create(
                    model=self._speech_model,
                    voice=self._voice,
                    input=piece,
                    response_format="mp3",
                    **options,
                ) as response:
                    async for chunk in response.iter_bytes():
                        yield chunk
        except sdk_failures() as exc:
            raise translate_error(exc) from exc

    async def aclose(self) -> None:
        await self._client.aclose()
