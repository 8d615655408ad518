"""Offline voice (docs/voice.md): with no provider key, the local Whisper model
transcribes clips and espeak-ng reads replies, where ``make setup`` installed them;
with a key, or with ``SPARK_OFFLINE_VOICE=false``, nothing changes."""

from __future__ import annotations

import asyncio
import io
import wave
from pathlib import Path

import pytest

from shared.attachments import audio_worker
from shared.clock import SystemClock
from shared.config import Settings
from shared.errors import ProviderUnavailable
from shared.llm.base import TextDelta
from shared.llm.transcribe import Clip, Transcribed, TranscriptionEvent
from shared.voice.espeak_voice import EspeakVoice
from shared.voice.whisper_local import WhisperTranscriber
from shared.wiring import build_transcriber, build_voice
from tests.voice_samples import PASSAGE, need_espeak, said, word_error_rate

NO_KEY = {"SPARK_MODEL": "gpt-4o-mini", "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
MAX_WORD_ERROR_RATE = 0.35


def installed() -> WhisperTranscriber:
    found = WhisperTranscriber.find()
    if found is None:
        pytest.fail("the offline-voice virtualenv is missing: run make setup")
    return found


async def speech(voice: EspeakVoice, text: str) -> bytes:
    return b"".join([chunk async for chunk in voice.speak(text)])


async def heard(transcriber: WhisperTranscriber, clip: Clip) -> list[TranscriptionEvent]:
    return [event async for event in transcriber.transcribe(clip)]


def test_offline_voice_is_chosen_only_with_no_key_and_when_not_turned_off() -> None:
    need_espeak()
    installed()
    offline = Settings.from_env(NO_KEY)
    assert isinstance(build_transcriber(offline), WhisperTranscriber)
    live, speaker = build_voice(offline, SystemClock())
    assert live is None
    assert isinstance(speaker, EspeakVoice)
    assert speaker.media_type == "audio/wav"

    off = Settings.from_env({**NO_KEY, "SPARK_OFFLINE_VOICE": "false"})
    assert build_transcriber(off) is None
    assert build_voice(off, SystemClock()) == (None, None)

    keyed = Settings.from_env({**NO_KEY, "OPENAI_API_KEY": "sk-test"})
    assert not isinstance(build_transcriber(keyed), WhisperTranscriber)
    assert not isinstance(build_voice(keyed, SystemClock())[1], EspeakVoice)


def test_the_local_model_is_not_found_where_make_setup_did_not_install_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()  # half made: no .installed mark
    assert WhisperTranscriber.find(tmp_path) is None


def test_espeak_reads_the_text_aloud_as_wav_even_when_it_starts_like_an_option() -> None:
    need_espeak()
    voice = EspeakVoice.find()
    assert voice is not None
    assert voice.voice_key == "local:espeak-ng:en-gb"
    for text in ("Fractions are parts of a whole.", "-v en-us --help"):
        made = asyncio.run(speech(voice, text))
        assert made[:4] == b"RIFF" and made[8:12] == b"WAVE"
        with wave.open(io.BytesIO(made)) as head:
            assert (head.getnchannels(), head.getsampwidth()) == (1, 2)
        # about a second of 22.05 kHz 16-bit sound per two or three words
        assert len(made) > 30_000


def test_espeak_failing_is_a_provider_failure(tmp_path: Path) -> None:
    for program in ("/bin/false", str(tmp_path / "missing")):
        with pytest.raises(ProviderUnavailable):
            asyncio.run(speech(EspeakVoice(program), "Hello."))


def test_the_local_model_hears_espeaks_passage_within_a_small_word_error_rate() -> None:
    transcriber = installed()
    sound = asyncio.run(audio_worker.decode(said(PASSAGE), 120))
    clip = Clip(said(PASSAGE), "audio/webm", "clip.webm", sound.duration_seconds, sound.wav)
    events = asyncio.run(heard(transcriber, clip))
    assert isinstance(events[-1], Transcribed)
    pieces = [event.text for event in events if isinstance(event, TextDelta)]
    assert pieces, "the segments are streamed as they are heard"
    assert "".join(pieces).strip() == events[-1].text
    rate = word_error_rate(PASSAGE, events[-1].text)
    assert rate <= MAX_WORD_ERROR_RATE, (rate, events[-1].text)
    assert events[-1].usage.input_tokens > 0  # the day's tokens are charged as elsewhere


def test_a_worker_that_fails_is_a_provider_failure(tmp_path: Path) -> None:
    transcriber = WhisperTranscriber(Path("/bin/false"))
    clip = Clip(b"", "audio/wav", "clip.wav", 1.0, b"RIFF" + b"\0" * 40)
    with pytest.raises(ProviderUnavailable):
        asyncio.run(heard(transcriber, clip))


def test_a_missing_virtualenv_is_a_provider_failure(tmp_path: Path) -> None:
    transcriber = WhisperTranscriber(tmp_path / "bin" / "python")
    clip = Clip(b"", "audio/wav", "clip.wav", 1.0, b"RIFF" + b"\0" * 40)
    with pytest.raises(ProviderUnavailable):
        asyncio.run(heard(transcriber, clip))
