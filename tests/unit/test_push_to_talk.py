"""Push-to-talk on fakes: real clips (espeak-ng, converted with PyAV) uploaded, sniffed,
decoded and measured; ``voice`` on a message transcribed by the package's
``FakeTranscriber`` (it hears what it is told: no real speech recognition here) before
the run opens; and every refusal with nothing written and the run's place freed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.attachment_rules import sniff
from shared.attachments.audio import NotAudio, TooLong, probe
from shared.attachments.voice import NO_SPEECH
from shared.config import ConfigurationError, Settings
from shared.llm.scripted import ScriptedProvider, Step
from shared.llm.transcribe import Clip, FakeTranscriber
from shared.wiring import build_transcriber
from tests.unit.helpers import Fakes, Harness, api_of, make_service, serving
from tests.voice_samples import SENTENCE, longer_than, not_audio, silence, spoken

MESSAGES = "/api/spark/agent/messages"
UPLOADS = "/api/spark/agent/uploads"
AUTH = {"Authorization": "Bearer alice-token"}
SSE = {**AUTH, "Accept": "text/event-stream"}
TYPES = ["audio/wav", "audio/webm", "audio/ogg", "audio/mpeg", "audio/mp4"]


# --- the clip itself: sniffed, decoded, measured ---------------------------------------


@pytest.mark.parametrize("media_type", TYPES)
def test_a_spoken_sentence_is_sniffed_and_decoded_in_each_type(media_type: str) -> None:
    data = spoken(media_type)
    assert sniff(data[:12]) == media_type
    sound = probe(data, 120)
    assert 3.0 < sound.duration_seconds < 3.5  # espeak-ng says it in about 3.2 s
    assert not sound.silent and sound.loudest_dbfs > -25
    assert sound.wav.startswith(b"RIFF") and sniff(sound.wav[:12]) == "audio/wav"


def test_silence_is_measured_as_silent() -> None:
    sound = probe(silence("audio/webm"), 120)
    assert sound.silent and 2.9 < sound.duration_seconds < 3.1


def test_a_clip_past_the_limit_is_refused_once_the_limit_is_decoded() -> None:
    with pytest.raises(TooLong) as caught:
        probe(longer_than(121), 120)
    assert 120 < caught.value.seconds < 121  # decoding stopped just past the limit


def test_bytes_that_only_start_like_audio_are_not_audio() -> None:
    assert sniff(not_audio()[:12]) == "audio/wav"
    with pytest.raises(NotAudio):
        probe(not_audio(), 120)


# --- configuration: who transcribes ----------------------------------------------------


def test_the_transcriber_follows_the_chat_provider_or_its_own_setting() -> None:
    assert Settings.from_env({}).transcription == ("openai", "gpt-4o-mini-transcribe")
    on_gemini = Settings.from_env({"SPARK_MODEL": "google:gemini-2.5-flash"})
    assert on_gemini.transcription == ("google", "gemini-2.5-flash")
    # Anthropic hears no audio: OpenAI's model by default, or the one named.
    on_claude = Settings.from_env({"SPARK_MODEL": "anthropic:claude-sonnet-4-5"})
    assert on_claude.transcription == ("openai", "gpt-4o-mini-transcribe")
    named = Settings.from_env(
        {"SPARK_MODEL": "anthropic:claude-x", "SPARK_TRANSCRIBE_MODEL": "google:gemini-x"}
    )
    assert named.transcription == ("google", "gemini-x")
    with pytest.raises(ConfigurationError, match="Anthropic's models take no audio"):
        Settings.from_env({"SPARK_TRANSCRIBE_MODEL": "anthropic:claude-x"})
    with pytest.raises(ConfigurationError, match="SPARK_TRANSCRIBE_MODEL="):
        Settings.from_env({"SPARK_TRANSCRIBE_MODEL": "mistral:voxtral"})


def test_without_a_key_or_base_url_there_is_no_transcriber() -> None:
    # (Offline, the local model transcribes where installed: test_offline_voice.py.)
    assert build_transcriber(Settings.from_env({"SPARK_OFFLINE_VOICE": "false"})) is None
    # On Anthropic with only Anthropic's key, voice still needs OpenAI's (or Gemini's).
    claude_only = {"SPARK_MODEL": "anthropic:claude-x", "ANTHROPIC_API_KEY": "k"}
    assert build_transcriber(Settings.from_env(claude_only)) is None
    with_openai = {**claude_only, "OPENAI_API_KEY": "k2"}
    transcriber = build_transcriber(Settings.from_env(with_openai))
    assert transcriber is not None and transcriber.label == "gpt-4o-mini-transcribe"


# --- uploads ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claimed", "bound", "extension"),
    [
        ("audio/webm;codecs=opus", "audio/webm", "webm"),
        ("audio/ogg", "audio/ogg", "ogg"),
        ("audio/mpeg", "audio/mpeg", "mp3"),
        ("audio/x-m4a", "audio/mp4", "m4a"),
        ("audio/wav", "audio/wav", "wav"),
    ],
)
async def test_an_audio_upload_session_binds_the_type(
    claimed: str, bound: str, extension: str
) -> None:
    harness = make_service(ScriptedProvider([]))
    async with serving(api_of(harness)) as client:
        body = {"fileName": "clip", "contentType": claimed, "sizeBytes": 1000}
        started = await client.post(UPLOADS, headers=AUTH, json=body)
    assert started.status_code == 201, started.text
    answer = started.json()
    assert answer["headers"] == {"Content-Type": bound}
    assert answer["storagePath"].endswith(f"/clip.{extension}")


# --- a voice message -------------------------------------------------------------------


def voiced(
    steps: list[Step] | None = None,
    heard: str = SENTENCE,
    *,
    transcriber: bool = True,
    **settings: int,
) -> tuple[Harness, FakeTranscriber]:
    fake = FakeTranscriber(heard)
    harness = make_service(
        ScriptedProvider(steps if steps is not None else []),
        fakes=Fakes(),
        transcriber=fake if transcriber else None,
        **settings,
    )
    return harness, fake


async def upload(harness: Harness, data: bytes, name: str = "clip.webm") -> str:
    path = f"alice/uploads/upl_t/{name}"
    await harness.fakes.files.write(path, data, "application/octet-stream")
    return path


def events_of(body: str) -> list[tuple[str, dict[str, Any], str]]:
    """(event, data, id) of each frame of an SSE body."""
    frames = []
    for block in body.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if not line.startswith(":")
        )
        if "event" in fields:
            frames.append((fields["event"], json.loads(fields["data"]), fields.get("id", "")))
    return frames


def nothing_written(harness: Harness) -> None:
    assert harness.fakes.store.writes == {}
    ledger = harness.fakes.ledger._documents.get("alice") or {}
    assert not ledger.get("runs"), "the run's place was not freed"


@pytest.mark.parametrize("media_type", ["audio/webm", "audio/mpeg", "audio/wav"])
async def test_a_voice_message_streams_its_transcript_then_the_reply(media_type: str) -> None:
    harness, fake = voiced([Step.reply("Fractions", " it is.")])
    path = await upload(harness, spoken(media_type))
    async with serving(api_of(harness)) as client:
        response = await client.post(MESSAGES, headers=SSE, json={"voice": {"storagePath": path}})
    assert response.status_code == 200, response.text
    frames = events_of(response.text)
    names = [name for name, _, _ in frames]
    # The words first, a piece at a time, then the whole; then the run as always.
    assert names[0] == "transcript" and names.index("run_start") > 0
    pieces = [d for n, d, _ in frames if n == "transcript"]
    assert all(not p["final"] for p in pieces[:-1]) and pieces[-1]["final"] is True
    assert "".join(p["content"] for p in pieces[:-1]) == SENTENCE == pieces[-1]["content"]
    run_id = next(d["runId"] for n, d, _ in frames if n == "run_start")
    assert {i for n, _, i in frames if n == "transcript"} == {f"{run_id}:0:0"}
    assert names[-1] == "done"

    (stored,) = harness.fakes.store._documents.values()
    user = stored["messages"][0]
    assert user["content"][0] == {"type": "text", "text": SENTENCE}
    clip = user["content"][1]["file"]
    assert clip["storagePath"] == path and clip["contentType"] == media_type
    assert 3.0 < clip["durationSeconds"] < 3.5
    (heard,) = fake.clips
    assert heard.media_type == media_type and heard.data == spoken(media_type)
    # The model reads the transcript, and is told of the clip, never sent its bytes.
    (request,) = harness.provider.requests  # type: ignore[attr-defined]
    said = request.messages[-1]
    assert said.text.startswith(SENTENCE) and "[Voice message:" in said.text
    assert said.images == ()
    # Transcription is charged to the user's day (33 tokens: 3.2 s at 10 a second).
    ledger = harness.fakes.ledger._documents["alice"]
    assert ledger["usage"]["tokens"] >= 33


async def test_a_voice_message_in_the_background_is_transcribed_before_the_202() -> None:
    harness, _ = voiced()  # a task writes the reply
    path = await upload(harness, spoken("audio/webm"))
    async with serving(api_of(harness)) as client:
        body = {"voice": {"storagePath": path}, "text": "(typed too)"}
        response = await client.post(MESSAGES, headers=AUTH, json=body)
    assert response.status_code == 202, response.text
    (stored,) = harness.fakes.store._documents.values()
    text = stored["messages"][0]["content"][0]["text"]
    assert text == f"{SENTENCE}\n\n(typed too)"
    assert stored["activeRun"]["status"] == "queued"


async def test_silence_is_refused_without_asking_the_provider() -> None:
    harness, fake = voiced()
    path = await upload(harness, silence("audio/webm"))
    async with serving(api_of(harness)) as client:
        response = await client.post(MESSAGES, headers=SSE, json={"voice": {"storagePath": path}})
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["message"]) == ("no_speech", NO_SPEECH)
    assert fake.clips == []
    nothing_written(harness)


async def test_no_words_heard_ends_the_stream_with_an_error_and_writes_nothing() -> None:
    harness, fake = voiced(heard="")
    path = await upload(harness, spoken("audio/webm"))
    async with serving(api_of(harness)) as client:
        response = await client.post(MESSAGES, headers=SSE, json={"voice": {"storagePath": path}})
        answer = await client.post(MESSAGES, headers=AUTH, json={"voice": {"storagePath": path}})
    assert response.status_code == 200  # the stream had started: the words come in it
    assert events_of(response.text)[-1][:2] == (
        "error",
        {"message": NO_SPEECH, "code": "no_speech"},
    )
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "no_speech"
    assert len(fake.clips) == 2
    nothing_written(harness)


@pytest.mark.parametrize(
    ("data", "status", "code", "words"),
    [
        (not_audio, 415, "unsupported_media_type", "could not be played as audio"),
        (lambda: b"just a text file", 415, "unsupported_media_type", "is not a voice clip"),
        (lambda: spoken("audio/webm"), 413, "payload_too_large", "at most 2 seconds long"),
    ],
)
async def test_a_clip_that_breaks_a_rule_is_refused_and_nothing_is_written(
    data: Any, status: int, code: str, words: str
) -> None:
    harness, fake = voiced(voice_max_seconds=2)
    path = await upload(harness, data())
    async with serving(api_of(harness)) as client:
        response = await client.post(MESSAGES, headers=SSE, json={"voice": {"storagePath": path}})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and words in error["message"]
    assert fake.clips == []
    nothing_written(harness)


async def test_voice_without_a_provider_is_refused_plainly_before_anything() -> None:
    harness, _ = voiced(transcriber=False)
    path = await upload(harness, spoken("audio/webm"))
    async with serving(api_of(harness)) as client:
        response = await client.post(MESSAGES, headers=SSE, json={"voice": {"storagePath": path}})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "voice_unavailable"
    assert "need a transcription provider" in error["message"]
    assert harness.fakes.files.reads == []
    assert harness.fakes.ledger.writes == 0
    nothing_written(harness)


async def test_a_clip_outside_ones_uploads_is_refused_unread() -> None:
    harness, _ = voiced()
    await harness.fakes.files.write("bob/uploads/upl_b/clip.webm", spoken("audio/webm"), "x")
    async with serving(api_of(harness)) as client:
        body = {"voice": {"storagePath": "bob/uploads/upl_b/clip.webm"}}
        response = await client.post(MESSAGES, headers=SSE, json=body)
    assert response.status_code == 403
    assert harness.fakes.files.reads == [] and harness.fakes.ledger.writes == 0


async def test_a_clip_is_not_an_attachment() -> None:
    harness, _ = voiced()
    path = await upload(harness, spoken("audio/webm"))
    attachment = {"storagePath": path, "contentType": "audio/webm", "sizeBytes": 1}
    async with serving(api_of(harness)) as client:
        body = {"text": "hi", "attachments": [attachment]}
        response = await client.post(MESSAGES, headers=SSE, json=body)
    assert response.status_code == 415
    nothing_written(harness)


def test_the_fake_transcriber_hears_what_it_is_told() -> None:
    clip = Clip(b"", "audio/wav", "a.wav", 1.0)
    fake = FakeTranscriber(lambda c: f"{c.duration_seconds:.0f} second")
    assert fake.label == "fake-transcriber"
    assert fake._heard(clip) == "1 second"  # type: ignore[operator]
