"""The voice adapters with the real ``openai`` and ``google-genai`` SDKs, over real
HTTP, against our fakes of the session-secret and speech endpoints."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.clock import ManualClock
from shared.errors import ProviderRejected
from shared.voice.gemini_voice import GeminiVoice, wav_header
from shared.voice.openai_voice import MAX_INPUT, OpenAIVoice
from tests.fakes.gemini_server import FakeGemini
from tests.fakes.openai_server import FakeOpenAI, ServerThread


@pytest.fixture
def openai_fake() -> Iterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    with ServerThread(fake.app) as server:
        yield fake, f"http://127.0.0.1:{server.port}/v1"


@pytest.fixture
def gemini_fake() -> Iterator[tuple[FakeGemini, str]]:
    fake = FakeGemini()
    with ServerThread(fake.app) as server:
        yield fake, f"http://127.0.0.1:{server.port}"


async def test_openai_mints_a_transcription_session_secret(
    openai_fake: tuple[FakeOpenAI, str],
) -> None:
    fake, url = openai_fake
    voice = OpenAIVoice.connect("sk-test", url, "gpt-4o-mini-transcribe", "gpt-4o-mini-tts")
    before = datetime.now(UTC)
    secret = await voice.mint(timedelta(seconds=60), timedelta(minutes=30))
    after = datetime.now(UTC)
    await voice.aclose()
    ((request, value),) = fake.secrets
    assert secret.value == value and value.startswith("ek_fake_")
    # Sixty seconds from when the fake made it (in whole seconds), however long the
    # round trip took on a loaded machine.
    second = timedelta(seconds=1)
    assert (
        before + timedelta(seconds=60) - second
        <= secret.expires_at
        <= after + timedelta(seconds=60)
    )
    assert request["expires_after"] == {"anchor": "created_at", "seconds": 60}
    transcription = request["session"]["audio"]["input"]["transcription"]
    assert request["session"]["type"] == "transcription"
    assert transcription == {"model": "gpt-4o-mini-transcribe", "language": "en"}


async def test_openai_speech_streams_mp3_in_pieces_within_its_input_limit(
    openai_fake: tuple[FakeOpenAI, str],
) -> None:
    fake, url = openai_fake
    voice = OpenAIVoice.connect("sk-test", url, "gpt-4o-mini-transcribe", "gpt-4o-mini-tts")
    text = "A sentence to read. " * 300  # 6,000 characters: two requests
    chunks = [chunk async for chunk in voice.speak(text)]
    await voice.aclose()
    assert len(fake.speeches) == 2
    assert all(len(s["input"]) <= MAX_INPUT for s in fake.speeches)
    assert {(s["model"], s["voice"], s["response_format"]) for s in fake.speeches} == {
        ("gpt-4o-mini-tts", "fable", "mp3")
    }
    assert "British English" in fake.speeches[0]["instructions"]
    assert b"".join(chunks).startswith(b"\xff\xfb")


async def test_openai_voice_errors_become_ours() -> None:
    from tests.fakes.openai_server import Script

    fake = FakeOpenAI(Script(status=401))
    fake.app.routes.clear()  # every path answers 404: the key or URL is wrong
    with ServerThread(fake.app) as server:
        voice = OpenAIVoice.connect("sk", f"http://127.0.0.1:{server.port}/v1", "m", "t")
        with pytest.raises(ProviderRejected):
            await voice.mint(timedelta(seconds=60), timedelta(minutes=30))
        await voice.aclose()


async def test_gemini_mints_a_one_use_token_locked_to_the_live_model(
    gemini_fake: tuple[FakeGemini, str],
) -> None:
    fake, url = gemini_fake
    clock = ManualClock()
    voice = GeminiVoice.connect("key", url, clock, "gemini-live-2.5-flash-preview", "tts")
    secret = await voice.mint(timedelta(seconds=60), timedelta(minutes=30))
    await voice.aclose()
    assert secret.value == "auth_tokens/fake-1"
    assert secret.expires_at == clock.now() + timedelta(seconds=60)
    (request,) = fake.tokens
    assert request["uses"] == 1
    assert request["newSessionExpireTime"].startswith("2026-01-01T00:01:00")
    assert request["expireTime"].startswith("2026-01-01T00:30:00")
    setup = request["bidiGenerateContentSetup"]
    assert setup["model"] == "models/gemini-live-2.5-flash-preview"
    assert setup["inputAudioTranscription"] == {}


async def test_gemini_speech_is_a_wav_stream_of_the_tts_models_pcm(
    gemini_fake: tuple[FakeGemini, str],
) -> None:
    fake, url = gemini_fake
    voice = GeminiVoice.connect("key", url, ManualClock(), "live", "gemini-2.5-flash-preview-tts")
    audio = b"".join([chunk async for chunk in voice.speak("Hello there.")])
    await voice.aclose()
    assert len(fake.speeches) == 1
    config = fake.speeches[0]["generationConfig"]
    assert config["responseModalities"] == ["AUDIO"]
    # The SDK (1.x) sends the voice's config with its Python names; the API takes both.
    assert '"Kore"' in json.dumps(config["speechConfig"])
    assert audio.startswith(wav_header())
    channels, rate = struct.unpack("<HI", audio[22:28])
    assert (channels, rate) == (1, 24_000)
    assert len(audio) > 44
