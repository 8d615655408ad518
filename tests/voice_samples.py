"""Real voice clips made in the tests: a sentence spoken by ``espeak-ng`` (Debian's; ``make
setup`` installs it) as WAV, converted with PyAV (the project's own decoder) to WebM/Opus,
Ogg/Opus, MP3 and M4A; silence; a clip past the length limit; a file that claims to be
audio and is not. Each is made once per test session."""

from __future__ import annotations

import functools
import io
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import av
import pytest

SENTENCE = "Hello Spark, please make me a lesson about fractions."

# (container, codec, sample rate) for each type a client may send.
FORMATS = {
    "audio/webm": ("webm", "libopus", 48_000),
    "audio/ogg": ("ogg", "libopus", 48_000),
    "audio/mpeg": ("mp3", "libmp3lame", 22_050),
    "audio/mp4": ("ipod", "aac", 22_050),
}


def need_espeak() -> str:
    found = shutil.which("espeak-ng")
    if found is None:
        pytest.fail("espeak-ng is not installed: run make setup (apt-get install espeak-ng)")
    return found


@functools.cache
def spoken_wav(text: str = SENTENCE) -> bytes:
    """``text`` spoken by espeak-ng: a 22.05 kHz mono WAV, about 3 s for ``SENTENCE``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spoken.wav"
        subprocess.run([need_espeak(), "-w", str(path), text], check=True, timeout=60)
        return path.read_bytes()


def _pcm(data: bytes) -> tuple[list[av.AudioFrame], int]:
    with av.open(io.BytesIO(data)) as source:
        rate = source.streams.audio[0].rate
        return [frame for frame in source.decode(audio=0)], rate


def encode(frames: list[av.AudioFrame], media_type: str) -> bytes:
    """``frames`` encoded as ``media_type`` (``audio/wav`` too) with PyAV."""
    container, codec, rate = FORMATS.get(media_type, ("wav", "pcm_s16le", 22_050))
    out = io.BytesIO()
    with av.open(out, mode="w", format=container) as target:
        stream = target.add_stream(codec, rate=rate, layout="mono")  # type: ignore[call-overload]
        resampler = av.AudioResampler(
            format=stream.codec_context.format.name, layout="mono", rate=rate
        )
        for frame in [*frames, None]:
            for converted in resampler.resample(frame):
                converted.pts = None
                for packet in stream.encode(converted):
                    target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    return out.getvalue()


@functools.cache
def spoken(media_type: str = "audio/wav") -> bytes:
    """``SENTENCE`` spoken, as ``media_type``."""
    wav = spoken_wav()
    if media_type == "audio/wav":
        return wav
    frames, _ = _pcm(wav)
    return encode(frames, media_type)


def _tone(seconds: float, amplitude: float, rate: int = 22_050) -> av.AudioFrame:
    import array
    import math

    samples = array.array(
        "h",
        (
            round(amplitude * 32767 * math.sin(2 * math.pi * 220 * n / rate))
            for n in range(int(seconds * rate))
        ),
    )
    frame = av.AudioFrame(format="s16", layout="mono", samples=len(samples))
    frame.planes[0].update(samples.tobytes())
    frame.sample_rate = rate
    return frame


@functools.cache
def silence(media_type: str = "audio/wav", seconds: float = 3.0) -> bytes:
    """``seconds`` of digital silence."""
    return encode([_tone(seconds, 0.0)], media_type)


@functools.cache
def longer_than(seconds: int, media_type: str = "audio/webm") -> bytes:
    """The spoken sentence said again and again, past ``seconds`` in all."""
    frames, rate = _pcm(spoken_wav())
    length = sum(f.samples for f in frames) / rate
    repeats = int(seconds / length) + 2
    return encode(frames * repeats, media_type)


def not_audio() -> bytes:
    """Text that starts like a WAV file (``RIFF…WAVE``) and is nothing of the kind."""
    return b"RIFF\x24\x00\x00\x00WAVE" + b"this is a note, not a recording. " * 40


PASSAGE = (
    "Please make me a lesson about the water cycle for my class. "
    "Can you check my homework on the causes of the First World War? "
    "My daughter is learning her times tables this week."
)
"""What the offline-voice tests say: requests a teacher, a learner and a parent make,
about 11 s as espeak-ng speaks them."""


def words(text: str) -> list[str]:
    """``text``'s words as a transcript is judged: lower case, without punctuation."""
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


def word_error_rate(spoken: str, heard: str) -> float:
    """The words substituted, left out and added to hear ``heard`` for ``spoken``
    (the least number: an edit distance over words), per word spoken."""
    said, got = words(spoken), words(heard)
    previous = list(range(len(got) + 1))
    for n, word in enumerate(said, 1):
        row = [n]
        for m, other in enumerate(got, 1):
            row.append(min(previous[m] + 1, row[m - 1] + 1, previous[m - 1] + (word != other)))
        previous = row
    return previous[-1] / max(len(said), 1)


@functools.cache
def said(text: str, media_type: str = "audio/webm") -> bytes:
    """``text`` spoken by espeak-ng, as ``media_type``."""
    if media_type == "audio/wav":
        return spoken_wav(text)
    frames, _ = _pcm(spoken_wav(text))
    return encode(frames, media_type)


@functools.cache
def padded_wav(text: str, before: float, after: float) -> tuple[bytes, float]:
    """``text`` spoken by espeak-ng as a WAV, with ``before`` and ``after`` seconds of
    silence around it (a browser's fake microphone plays its file in a loop: the silence
    keeps a recording from catching the words' start again), and how long the words last."""
    frames, rate = _pcm(spoken_wav(text))
    spoken_seconds = sum(f.samples for f in frames) / rate
    return encode([_tone(before, 0.0, rate), *frames, _tone(after, 0.0, rate)], "audio/wav"), (
        spoken_seconds
    )
