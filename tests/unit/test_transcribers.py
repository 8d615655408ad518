"""Conformance of the transcription adapters: each, on its real SDK, against our loopback
fake of its provider (real HTTP). The fakes cannot hear: they are told what a clip's
bytes say (``hear``), so what is checked is the wire (the request each SDK sends, the
streamed pieces and the whole, the usage, the errors), not speech recognition."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from shared.attachments.audio import probe
from shared.errors import ProviderUnavailable
from shared.llm.base import TextDelta
from shared.llm.gemini import GeminiTranscriber
from shared.llm.openai import OpenAITranscriber
from shared.llm.transcribe import TRANSCRIBE_INSTRUCTION, Clip, Transcribed, Transcriber
from shared.schemas.documents import Usage
from tests.fakes.gemini_server import FakeGemini
from tests.fakes.openai_server import FakeOpenAI, ServerThread
from tests.voice_samples import SENTENCE, spoken


def clip_of(media_type: str = "audio/webm") -> Clip:
    data = spoken(media_type)
    sound = probe(data, 120)
    return Clip(data, media_type, "clip.webm", sound.duration_seconds, sound.wav)


@dataclass
class Adapter:
    name: str
    fake: Any
    connect: Callable[[str], Transcriber]
    heard_bytes: Callable[[Clip], bytes]  # what the adapter sends: the fake keys on it


@pytest.fixture(scope="module", params=["openai", "gemini"])
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    if request.param == "openai":
        fake: Any = FakeOpenAI()
        with ServerThread(fake.app) as server:
            url = f"http://127.0.0.1:{server.port}/v1"
            yield Adapter(
                "openai",
                fake,
                lambda model: OpenAITranscriber.connect(model, "k", url, max_retries=0),
                lambda clip: clip.data,
            )
        return
    fake = FakeGemini()
    with ServerThread(fake.app) as server:
        url = f"http://127.0.0.1:{server.port}"
        yield Adapter(
            "gemini",
            fake,
            lambda model: GeminiTranscriber.connect(model, "k", url, max_retries=0),
            lambda clip: clip.wav,
        )


async def heard(transcriber: Transcriber, clip: Clip) -> list[TextDelta | Transcribed]:
    return [event async for event in transcriber.transcribe(clip)]


MODEL = {"openai": "gpt-4o-mini-transcribe", "gemini": "gemini-2.5-flash"}


async def test_each_adapter_streams_the_pieces_then_the_whole(adapter: Adapter) -> None:
    clip = clip_of()
    adapter.fake.hear(adapter.heard_bytes(clip), SENTENCE)
    events = await heard(adapter.connect(MODEL[adapter.name]), clip)
    *pieces, done = events
    assert pieces and all(isinstance(p, TextDelta) for p in pieces)
    assert "".join(p.text for p in pieces if isinstance(p, TextDelta)) == SENTENCE
    assert isinstance(done, Transcribed) and done.text == SENTENCE
    assert done.usage.input_tokens > 0  # what the provider said it cost


async def test_each_adapter_hears_nothing_as_an_empty_transcript(adapter: Adapter) -> None:
    clip = clip_of("audio/mpeg")
    events = await heard(adapter.connect(MODEL[adapter.name]), clip)
    assert events[-1] == Transcribed("", events[-1].usage)  # type: ignore[union-attr]
    assert not [e for e in events if isinstance(e, TextDelta) and e.text]


async def test_openai_sends_the_clip_as_it_was_uploaded() -> None:
    fake = FakeOpenAI()
    clip = clip_of()
    with ServerThread(fake.app) as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        await heard(OpenAITranscriber.connect("gpt-4o-mini-transcribe", "k", url), clip)
    (said,) = fake.transcriptions
    assert said == {
        "model": "gpt-4o-mini-transcribe",
        "name": "clip.webm",
        "type": "audio/webm",
        "stream": True,
        "size": len(clip.data),
    }


async def test_whisper_cannot_stream_so_it_is_asked_for_the_whole() -> None:
    fake = FakeOpenAI()
    clip = clip_of()
    fake.hear(clip.data, SENTENCE)
    with ServerThread(fake.app) as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        events = await heard(OpenAITranscriber.connect("whisper-1", "k", url), clip)
    # Billed by its seconds (3.2 s) at ten tokens a second.
    assert events == [Transcribed(SENTENCE, Usage(input_tokens=32, output_tokens=0))]
    assert fake.transcriptions[0]["stream"] is False


async def test_gemini_gets_the_decoded_wav_and_the_instruction() -> None:
    fake = FakeGemini()
    clip = clip_of("audio/mp4")
    fake.hear(clip.wav, SENTENCE)
    with ServerThread(fake.app) as server:
        url = f"http://127.0.0.1:{server.port}"
        events = await heard(GeminiTranscriber.connect("gemini-x", "k", url), clip)
    assert events[-1] == Transcribed(SENTENCE, Usage(input_tokens=105, output_tokens=9))
    (body,) = fake.requests
    (content,) = body["contents"]
    audio, instruction = content["parts"]
    assert audio["inlineData"]["mime_type"] == "audio/wav"  # as google-genai sends it
    assert base64.urlsafe_b64decode(audio["inlineData"]["data"]) == clip.wav
    assert instruction == {"text": TRANSCRIBE_INSTRUCTION}
    assert fake.paths[0].endswith("/models/gemini-x:streamGenerateContent?alt=sse")


@pytest.mark.parametrize(
    "connect",
    [
        lambda: OpenAITranscriber.connect("m", "k", "http://127.0.0.1:9/v1", max_retries=0),
        lambda: GeminiTranscriber.connect("m", "k", "http://127.0.0.1:9", max_retries=0),
    ],
    ids=["openai", "gemini"],
)
async def test_an_unreachable_provider_is_our_error(connect: Callable[[], Transcriber]) -> None:
    with pytest.raises(ProviderUnavailable):
        await heard(connect(), clip_of())
