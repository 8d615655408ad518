"""A voice clip read from its own container with PyAV (the only module importing ``av``).

What a client says about a clip (its type, its length) is only what it says: the clip
is opened and decoded here, so its length is the sound it really holds, and a file
that merely starts like audio is refused.

The work is bounded before it is done, since a small file can declare hours of sound
(a small WebM holding one PCM block decoded to many minutes in one frame, and took
hundreds of MiB before its length was checked: ``tests/hostile_audio.py`` holds such
clips, and bench/audio_decode.py measures each). ``probe`` opens a clip only with the
demuxer its first bytes name, with at most ``MAX_STREAMS`` streams, and takes only the
codecs push-to-talk needs (Opus or Vorbis in WebM and Ogg, MP3, AAC in M4A, PCM in
WAV), at 8–192 kHz in at most 8 channels. Before decoding a packet it refuses one
larger than any of those codecs makes, declaring more than 10 s, or (PCM) making more
than ``MAX_FRAME_SAMPLES``; then any frame that still comes out larger, and a clip
whose decoding passes ``CPU_SECONDS`` of CPU. It stops as soon as the sound is past the
limit, so a clip that would decode to hours (Opus at 6 kbit/s packs 9 hours into
25 MB) costs no more than one at the limit. FFmpeg itself may allocate no single block
above ``MAX_ALLOCATION``: an ID3 tag or a movie header compressed with zlib declares
its own inflated size, up to 4 GB, and the demuxer allocated it while opening the
file, before any packet. ID3 tags in front of an MP3 are skipped unread.

``audio_worker.decode`` runs ``probe`` in a child process with its address space
and CPU time capped, and kills it past ``TIMEOUT_SECONDS``: whatever FFmpeg does that
the checks above do not foresee is bounded there, and the api never imports PyAV.
``docs/voice.md`` states the bounds and what they cost.

The decoded sound is also measured: a clip whose loudest moment is quieter than
``SILENT_DBFS`` holds nothing to transcribe, and is refused without asking a provider
(a provider asked about silence may invent words).
"""

from __future__ import annotations

import ctypes
import functools
import math
import struct
import time
from dataclasses import dataclass
from operator import mul
from typing import TYPE_CHECKING, TypeAlias

from shared.attachment_rules import SNIFF_BYTES, sniff

if TYPE_CHECKING:
    from av.audio.plane import AudioPlane

RATE = 16_000
"""Samples a second the sound is measured at (mono, 16-bit): speech needs no more."""
WINDOW = RATE // 20
"""Loudness is judged over 50 ms windows: a click is shorter, a syllable longer."""
SILENT_DBFS = -45.0
"""A clip whose loudest window is quieter than this (dB below full scale) is silence:
speech recorded by a phone or a laptop peaks far above it (espeak-ng's: about -10),
a quiet room stays below it."""
_FULL_SCALE = 32768.0

Buffer: TypeAlias = bytes | bytearray | memoryview

# What push-to-talk takes: for each type the first bytes name, the demuxer it is opened
# with (never a guess among FFmpeg's hundreds) and the codecs it may hold.
_PCM_BYTES = {
    "pcm_u8": 1,
    "pcm_alaw": 1,
    "pcm_mulaw": 1,
    "pcm_s16le": 2,
    "pcm_s24le": 3,
    "pcm_s32le": 4,
    "pcm_f32le": 4,
    "pcm_f64le": 8,
}
CONTAINERS: dict[str, tuple[str, frozenset[str]]] = {
    "audio/webm": ("matroska", frozenset({"opus", "vorbis"})),
    "audio/ogg": ("ogg", frozenset({"opus", "vorbis"})),
    "audio/mpeg": ("mp3", frozenset({"mp3"})),
    "audio/mp4": ("mov", frozenset({"aac"})),
    "audio/wav": ("wav", frozenset(_PCM_BYTES)),
}
MIN_RATE, MAX_RATE = 8_000, 192_000
"""Sample rates taken (Hz): a telephone's to a studio's."""
MAX_CHANNELS = 8
MAX_PACKET_BYTES = 128 * 1024
"""No packet of the codecs taken is larger: Opus's at most 8 KB a channel, AAC's 6 KB,
MP3's 3 KB, WAV's 64 KB (FFmpeg reads PCM 4 KB or one block at a time)."""
MAX_PACKET_SECONDS = 10.0
"""No packet of the codecs taken lasts longer (Opus's at most 120 ms): a container
declaring more is lying."""
MAX_FRAME_SAMPLES = 65_536
"""Samples a channel any one frame may hold (Opus's at most 5,760, AAC's 2,048, MP3's
1,152): a frame is at most 4 MB decoded, 8 s resampled."""
CPU_SECONDS = 1.5
"""CPU time one clip's decoding may take (this thread's): well above what the longest
speech clip of any type takes (bench/audio_decode.py measures both); past this, the clip
is refused as damaged (long 8-channel Opus noise is)."""
MAX_ALLOCATION = 16 * 1024 * 1024
"""The largest block FFmpeg may allocate at once while a clip is read (``av_max_alloc``)."""
MAX_STREAMS = 4
"""Streams a container may declare (a clip has one): FFmpeg indexes every track's sample
table when it opens an M4A, and a clip of a thousand tracks took far more memory than
the child may have, in allocations each under ``MAX_ALLOCATION`` (bench/audio_decode.py
measures the hostile corpus's many-track clip)."""
_PROBE_BYTES = 256 * 1024
"""What FFmpeg may read to learn a stream's parameters (its default, 5 MB, is a fifth of
a clip: a many-channel WAV cost a large share of ``CPU_SECONDS`` to be refused;
bench/audio_decode.py measures it)."""
_READ_BYTES = 64 * 1024
"""The most the demuxer is handed by one read: a block declaring 20 MB is read piece by
piece into FFmpeg's own buffer (which ``MAX_ALLOCATION`` bounds), never copied whole."""


class NotAudio(Exception):
    """The bytes are not a clip that can be decoded (or hold no sound), or decoding it
    would cost more than any voice clip does."""


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
    """The 16 kHz mono 16-bit sound fed to it, kept once, and its loudest window's RMS."""

    def __init__(self) -> None:
        self.pcm = bytearray()
        self._judged = 0  # samples whose windows are measured
        self.loudest = 0.0

    @property
    def samples(self) -> int:
        return len(self.pcm) // 2

    def feed(self, plane: AudioPlane, samples: int) -> None:
        with memoryview(plane) as view:
            self.pcm += view[: samples * 2]
        with memoryview(self.pcm) as raw, raw.cast("h") as sound:
            whole = len(sound) - (len(sound) - self._judged) % WINDOW
            for start in range(self._judged, whole, WINDOW):
                window = sound[start : start + WINDOW]
                self.loudest = max(self.loudest, sum(map(mul, window, window)) / WINDOW)
            self._judged = whole

    def end(self) -> float:
        with memoryview(self.pcm) as raw, raw.cast("h") as sound:
            if self._judged < len(sound):
                tail = sound[self._judged :]
                self.loudest = max(self.loudest, sum(map(mul, tail, tail)) / len(tail))
        rms = math.sqrt(self.loudest) / _FULL_SCALE
        return 20 * math.log10(rms) if rms > 0 else -math.inf


class _Reader:
    """The clip as the demuxer reads it, at most ``_READ_BYTES`` a call."""

    def __init__(self, data: memoryview) -> None:
        self._data = data
        self._at = 0

    def read(self, size: int = -1) -> bytes:
        wanted = _READ_BYTES if size < 0 else min(size, _READ_BYTES)
        chunk = bytes(self._data[self._at : self._at + wanted])
        self._at += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        self._at = max(0, (0, self._at, len(self._data))[whence] + offset)
        return self._at

    def tell(self) -> int:
        return self._at


@functools.cache
def prepare() -> bool:
    """Import PyAV and cap FFmpeg's allocations (``MAX_ALLOCATION``) in this process;
    whether the cap is set (PyAV's own libavutil found among the loaded libraries).

    PyAV does not wrap ``av_max_alloc``; it is called in the very library PyAV loaded.
    The cap is the process's: only this module uses FFmpeg.
    """
    # Imported with the first clip, not with the process: only the decoding child
    # (``audio_worker``) and the tests ever import it.
    import av  # noqa: F401

    try:
        with open("/proc/self/maps") as maps:
            found = {line.split()[-1] for line in maps if "libavutil" in line}
    except OSError:  # not Linux: the child's address-space limit still bounds it
        return False
    for path in sorted(found):
        library = ctypes.CDLL(path)
        library.av_max_alloc.argtypes = [ctypes.c_size_t]
        library.av_max_alloc.restype = None
        library.av_max_alloc(MAX_ALLOCATION)
    return bool(found)


def probe(data: Buffer, max_seconds: float) -> Sound:
    """Decode ``data``'s first audio stream (at most ``max_seconds`` of it) and measure
    it, in this thread, within the bounds above.

    Raises:
        NotAudio: not a type, container, codec or stream push-to-talk takes; nothing
            decodable; or more work than any voice clip.
        TooLong: it holds more than ``max_seconds`` of sound.
    """
    prepare()
    import av

    started = time.thread_time()
    clip = memoryview(data).cast("B")
    media_type = sniff(bytes(clip[:SNIFF_BYTES]))
    if media_type not in CONTAINERS:
        raise NotAudio(f"not a voice clip's type ({media_type})")
    demuxer, codecs = CONTAINERS[media_type]
    if media_type == "audio/mpeg":
        clip = _without_id3(clip)
    limit = math.floor(max_seconds * RATE)
    loudness = _Loudness()
    try:
        with av.open(
            _Reader(clip),
            mode="r",
            format=demuxer,
            options={"probesize": str(_PROBE_BYTES), "max_streams": str(MAX_STREAMS)},
            metadata_errors="ignore",
        ) as container:
            if not container.streams.audio:
                raise NotAudio("no audio stream")
            stream = container.streams.audio[0]
            codec = stream.codec_context
            if codec is None:
                raise NotAudio("no decoder")
            _judge_stream(codec.codec.canonical_name, codecs, codec.sample_rate, codec.channels)
            pcm_bytes = _PCM_BYTES.get(codec.codec.canonical_name, 0) * codec.channels
            base = stream.time_base
            ticks = MAX_PACKET_SECONDS * base.denominator / base.numerator if base else math.inf
            resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
            for packet in container.demux(stream):
                if time.thread_time() - started > CPU_SECONDS:
                    raise NotAudio(f"decoding took more than {CPU_SECONDS} s of CPU")
                _judge_packet(packet.size, packet.duration or 0, ticks, pcm_bytes)
                for frame in packet.decode():
                    _judge_frame(frame.samples, frame.sample_rate, frame.layout.nb_channels)
                    for out in resampler.resample(frame):
                        loudness.feed(out.planes[0], out.samples)
                    if loudness.samples > limit:
                        raise TooLong(loudness.samples / RATE)
            for out in resampler.resample(None):
                loudness.feed(out.planes[0], out.samples)
    except (av.FFmpegError, ValueError, IndexError, EOFError, MemoryError) as exc:
        raise NotAudio(repr(exc)) from None
    if loudness.samples > limit:
        raise TooLong(loudness.samples / RATE)
    if loudness.samples == 0:
        raise NotAudio("no sound decoded")
    return Sound(loudness.samples / RATE, loudness.end(), _wav(loudness.pcm))


def _without_id3(clip: memoryview) -> memoryview:
    """``clip`` after the ID3v2 tags in front of it: nothing of a tag is needed, and
    FFmpeg inflates a compressed tag frame to whatever size the frame declares."""
    while len(clip) >= 10 and bytes(clip[:3]) == b"ID3":
        size = 0
        for byte in clip[6:10]:
            size = size << 7 | (byte & 0x7F)
        clip = clip[10 + size + (10 if clip[5] & 0x10 else 0) :]
    return clip


def _judge_stream(codec: str, codecs: frozenset[str], rate: int, channels: int) -> None:
    if codec not in codecs:
        raise NotAudio(f"{codec} is not a codec push-to-talk takes in this container")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise NotAudio(f"a sample rate of {rate} Hz")
    if not 1 <= channels <= MAX_CHANNELS:
        raise NotAudio(f"{channels} channels")


def _judge_packet(size: int, duration: int, ticks: float, pcm_bytes: int) -> None:
    """Before a packet is decoded: its size, its declared length (``ticks``: the most
    it may declare, in its stream's time base), and (PCM) how many samples it makes."""
    if size > MAX_PACKET_BYTES:
        raise NotAudio(f"a packet of {size} bytes")
    if duration > ticks:
        raise NotAudio(f"a packet declaring {duration / ticks * MAX_PACKET_SECONDS:.0f} s")
    if pcm_bytes and size // pcm_bytes > MAX_FRAME_SAMPLES:
        raise NotAudio(f"a packet of {size // pcm_bytes} samples")


def _judge_frame(samples: int, rate: int, channels: int) -> None:
    if samples > MAX_FRAME_SAMPLES:
        raise NotAudio(f"a frame of {samples} samples")
    if not MIN_RATE <= rate <= MAX_RATE or not 1 <= channels <= MAX_CHANNELS:
        raise NotAudio(f"a frame at {rate} Hz with {channels} channels")


def _wav(pcm: bytearray) -> bytes:
    """``pcm`` (16 kHz mono 16-bit) as a WAV file, copied once."""
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + len(pcm),
        b"WAVE",
        b"fmt ",
        16,
        1,  # PCM
        1,
        RATE,
        RATE * 2,
        2,
        16,
        b"data",
        len(pcm),
    )
    return header + pcm
