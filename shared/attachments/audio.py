"""A voice clip read from its own container with PyAV (the only module importing ``av``).

What a client says about a clip (its type, its length) is only what it says: the clip
is opened and decoded here, so its length is the sound it really holds, and a file
that merely starts like audio is refused. Decoding stops as soon as the clip is past
the limit, so a small file that would decode to hours (Opus at 6 kbit/s packs 9 hours
into 25 MB) costs no more than a clip at the limit.

The decoded sound is also measured: a clip whose loudest moment is quieter than
``SILENT_DBFS`` holds nothing to transcribe, and is refused without asking a provider
(a provider asked about silence may invent words).
"""

from __future__ import annotations

import io
import math
import wave
from array import array
from dataclasses import dataclass
from operator import mul

RATE = 16_000
"""Samples a second the sound is measured at (mono, 16-bit): speech needs no more."""
WINDOW = RATE // 20
"""Loudness is judged over 50 ms windows: a click is shorter, a syllable longer."""
SILENT_DBFS = -45.0
"""A clip whose loudest window is quieter than this (dB below full scale) is silence:
speech recorded by a phone or a laptop peaks far above it (espeak-ng's: about -10),
a quiet room stays below it."""
_FULL_SCALE = 32768.0


class NotAudio(Exception):
    """The bytes are not a clip that can be decoded (or hold no sound)."""


class TooLong(Exception):
    """The clip is longer than allowed; ``seconds`` is how far it was read."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"longer than {seconds:.1f} s")
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class Sound:
    """What a clip holds, as decoded: its length, its loudest 50 ms, and the sound
    itself as a 16 kHz mono WAV."""

    duration_seconds: float
    loudest_dbfs: float
    wav: bytes = b""

    @property
    def silent(self) -> bool:
        return self.loudest_dbfs < SILENT_DBFS


class _Loudness:
    """The loudest window's RMS of the mono 16-bit samples fed to it."""

    def __init__(self) -> None:
        self.samples = 0
        self._pending = array("h")
        self.loudest = 0.0
        self.pcm = bytearray()

    def feed(self, pcm: bytes) -> None:
        self.pcm += pcm
        chunk = array("h")
        chunk.frombytes(pcm)
        self.samples += len(chunk)
        self._pending.extend(chunk)
        whole = len(self._pending) - len(self._pending) % WINDOW
        for start in range(0, whole, WINDOW):
            window = self._pending[start : start + WINDOW]
            self.loudest = max(self.loudest, sum(map(mul, window, window)) / WINDOW)
        del self._pending[:whole]

    def end(self) -> float:
        if self._pending:
            window = self._pending
            self.loudest = max(self.loudest, sum(map(mul, window, window)) / len(window))
        rms = math.sqrt(self.loudest) / _FULL_SCALE
        return 20 * math.log10(rms) if rms > 0 else -math.inf


def probe(data: bytes, max_seconds: float) -> Sound:
    """Decode ``data``'s first audio stream (at most ``max_seconds`` of it) and measure it.

    Raises:
        NotAudio: no container PyAV can open, no audio stream, nothing decodable.
        TooLong: it holds more than ``max_seconds`` of sound.
    """
    # Imported with the first clip, not with the process: PyAV is ~35 ms of an
    # instance's cold start (`python -X importtime`) that only voice clips need.
    import av

    limit = math.floor(max_seconds * RATE)
    loudness = _Loudness()
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise NotAudio("no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
            for packet in container.demux(stream):
                for frame in packet.decode():
                    for out in resampler.resample(frame):
                        loudness.feed(bytes(out.planes[0])[: out.samples * 2])
                if loudness.samples > limit:
                    raise TooLong(loudness.samples / RATE)
            for out in resampler.resample(None):
                loudness.feed(bytes(out.planes[0])[: out.samples * 2])
    except (av.FFmpegError, ValueError, IndexError, EOFError) as exc:
        raise NotAudio(repr(exc)) from None
    if loudness.samples > limit:
        raise TooLong(loudness.samples / RATE)
    if loudness.samples == 0:
        raise NotAudio("no sound decoded")
    return Sound(loudness.samples / RATE, loudness.end(), _wav(bytes(loudness.pcm)))


def _wav(pcm: bytes) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(pcm)
    return out.getvalue()
