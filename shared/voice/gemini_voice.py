"""Live-audio secrets and spoken replies on Gemini (the ``google-genai`` SDK).

A live session is a Gemini Live connection opened by the browser with an ephemeral
token minted here (``auth_tokens``: one use, locked to the model, with input audio
transcription on). Spoken replies are the TTS model's audio: 16-bit PCM at 24 kHz,
sent as a WAV stream (a header whose lengths say "to the end", then the samples).
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import AsyncIterator
from datetime import timedelta

from google.genai import types

from shared.clock import Clock
from shared.egress.providers import LiveSecret
from shared.llm.gemini import FAILURES, SdkClient, translate_error

DEFAULT_VOICE = "Kore"
RATE = 24_000
"""Gemini TTS's samples a second (mono, 16-bit little-endian)."""

STREAMED = 0xFFFFFFFF
"""A WAV length that means "until the stream ends" (players read to the end)."""


def wav_header(rate: int = RATE, length: int = STREAMED) -> bytes:
    """The 44-byte header of a mono 16-bit PCM WAV of ``length`` bytes of samples."""
    riff = STREAMED if length == STREAMED else 36 + length
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", length)
    )


class GeminiVoice:
    """``SecretMinter`` and ``Speaker`` on one ``genai.Client`` (``gemini.SdkClient``)."""

    provider = "google"
    media_type = "audio/wav"

    def __init__(
        self, client: SdkClient, clock: Clock, live_model: str, speech_model: str, voice: str
    ) -> None:
        self._client = client
        self._clock = clock
        self._live_model = live_model
        self._speech_model = speech_model
        self._voice = voice or DEFAULT_VOICE

    @classmethod
    def connect(
        cls,
        api_key: str | None,
        base_url: str | None,
        clock: Clock,
        live_model: str,
        speech_model: str,
        voice: str = "",
    ) -> GeminiVoice:
        return cls(SdkClient(api_key, base_url), clock, live_model, speech_model, voice)

    @property
    def live_model(self) -> str:
        return self._live_model

    @property
    def voice_key(self) -> str:
        return f"google:{self._speech_model}:{self._voice}"

    async def mint(self, opens_within: timedelta, lasts: timedelta) -> LiveSecret:
        """``POST v1alpha/auth_tokens``: a token for one Live session of our model, which
        must open within ``opens_within`` and may last ``lasts``."""
        now = self._clock.now()
        config = types.CreateAuthTokenConfig(
            uses=1,
            expire_time=now + lasts,
            new_session_expire_time=now + opens_within,
            live_connect_constraints=types.LiveConnectConstraints(
                model=self._live_model,
                config=types.LiveConnectConfig(
                    response_modalities=[types.Modality.TEXT],
                    input_audio_transcription=types.AudioTranscriptionConfig(),
                ),
            ),
            http_options=types.HttpOptions(api_version="v1alpha"),
        )
        try:
            with warnings.catch_warnings():
                # "experimental": the pinned SDK's call (tests/unit/test_voice_adapters.py)
                warnings.filterwarnings("ignore", message=".*token creation.*experimental")
                token = await self._client.sdk.aio.auth_tokens.create(config=config)
        except FAILURES as exc:
            raise translate_error(exc) from exc
        if not token.name:
            raise translate_error(ValueError("auth_tokens gave no token"))
        return LiveSecret(token.name, now + opens_within)

    async def speak(self, text: str) -> AsyncIterator[bytes]:
        """The TTS model's PCM, after a streamed WAV header."""
        config = types.GenerateContentConfig(
            response_modalities=[types.Modality.AUDIO],
            speech_config=types.SpeechConfig(
                voice_config=types.VoiceConfig(
                    prebuilt_voice_config=types.PrebuiltVoiceConfig(voice_name=self._voice)
                )
            ),
        )
        prompt = f"Read aloud in a warm, clear British English voice:\n\n{text}"
        header = wav_header()  # sent with the first samples: a failure before is an error
        try:
            stream = await self._client.sdk.aio.models.generate_content_stream(
                model=self._speech_model, contents=prompt, config=config
            )
            async for chunk in stream:
                for candidate in chunk.candidates or ():
                    for part in (candidate.content.parts if candidate.content else None) or ():
                        if part.inline_data is not None and part.inline_data.data:
                            yield header + part.inline_data.data
                            header = b""
        except FAILURES as exc:
            raise translate_error(exc) from exc

    async def aclose(self) -> None:
        await self._client.aclose()
