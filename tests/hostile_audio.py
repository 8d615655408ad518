"""A hostile corpus of voice clips, made by code (nothing is downloaded), and a way to
measure what decoding one costs in a process of its own.

Each clip passes the sniff (``attachment_rules.sniff``: EBML, ``OggS``, ``RIFF…WAVE``,
``ftyp``, ``ID3``) and is within the upload limit (``MAX_BYTES``, 25 MB); what is inside
is built to make a decoder work or allocate far more than the bytes suggest: one PCM
block at 1,000 or 8 Hz (hours of sound in a few MB), 64 channels, lying headers, sizes
and lacing, bogus timestamps, zlib bombs where FFmpeg inflates before any packet (an
ID3 frame, an M4A movie header), a thousand tracks, damaged containers. Matroska, WAV
and the bombs are written byte by byte (EBML is an id, a length and a payload), Ogg and
M4A are muxed by PyAV and then falsified, Opus, MP3 and AAC are encoded by PyAV.

``measure_all(clips)`` decodes each clip with ``audio.probe`` in a process of its own,
forked from an interpreter that has imported PyAV (``python -m tests.hostile_audio
--measure``), and reads there its peak RSS above its baseline (``VmHWM``; the clip read,
PyAV imported) and its CPU time; the child's address space is capped (``CAP_BYTES``
more), so a runaway decode fails there instead of taking the machine. Only ``probe``
and its two exceptions are used: it measures any version of them.

Used by ``tests/unit/test_hostile_audio.py``, ``tests/unit/test_voice_decoding.py`` and
``bench/audio_decode.py``; ``python -m tests.hostile_audio`` lists the corpus.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
MiB = 1 << 20
CAP_BYTES = 3 << 30
"""The child's address space above its baseline: past it, the decode fails there."""
TIMEOUT_SECONDS = 60.0

Outcome = Literal["Sound", "NotAudio", "TooLong"]

# --- EBML (Matroska, WebM) ---------------------------------------------------------------

UNKNOWN_SIZE = b"\x01\xff\xff\xff\xff\xff\xff\xff"
"""An EBML size of all ones: 'unknown' (a live recorder's Segment and Cluster)."""


def _vint(value: int, length: int | None = None) -> bytes:
    """``value`` as an EBML variable-length size (its marker bit set)."""
    if length is None:
        length = next(n for n in range(1, 9) if value < (1 << (7 * n)) - 1)
    return ((1 << (7 * length)) | value).to_bytes(length, "big")


def _element(eid: int, payload: bytes, size: bytes | None = None) -> bytes:
    return (
        eid.to_bytes((eid.bit_length() + 7) // 8, "big") + (size or _vint(len(payload))) + payload
    )


def _uint(eid: int, value: int) -> bytes:
    return _element(eid, value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


def _float(eid: int, value: float) -> bytes:
    return _element(eid, struct.pack(">d", value))


def _text(eid: int, value: str) -> bytes:
    return _element(eid, value.encode())


def block(data: bytes, timecode: int = 0, flags: int = 0x80) -> bytes:
    """A SimpleBlock of track 1 (``flags``: 0x80 keyframe, 0x02/0x06 Xiph/EBML lacing)."""
    return _element(0xA3, _vint(1) + struct.pack(">hB", timecode, flags) + data)


def matroska(
    codec: str,
    rate: float,
    channels: int,
    blocks: list[bytes],
    *,
    doctype: str = "webm",
    bits: int | None = None,
    private: bytes = b"",
    per_cluster: int | None = None,
    cluster_ms: int = 0,
) -> bytes:
    """A Matroska (or WebM) file of one audio track whose clusters hold ``blocks``
    (elements already made: ``block``, or a BlockGroup), ``per_cluster`` a cluster
    (all in one by default), the k-th cluster starting at ``k * cluster_ms``."""
    header = _element(
        0x1A45DFA3,
        _uint(0x4286, 1)
        + _uint(0x42F7, 1)
        + _uint(0x42F2, 4)
        + _uint(0x42F3, 8)
        + _text(0x4282, doctype)
        + _uint(0x4287, 4)
        + _uint(0x4285, 2),
    )
    info = _element(0x1549A966, _uint(0x2AD7B1, 1_000_000) + _text(0x4D80, "hostile"))
    audio = _float(0xB5, rate) + _uint(0x9F, channels) + (_uint(0x6264, bits) if bits else b"")
    track = (
        _uint(0xD7, 1)
        + _uint(0x73C5, 1)
        + _uint(0x83, 2)
        + _text(0x86, codec)
        + (_element(0x63A2, private) if private else b"")
        + _element(0xE1, audio)
    )
    tracks = _element(0x1654AE6B, _element(0xAE, track))
    body = []
    per = per_cluster or max(1, len(blocks))
    for k, start in enumerate(range(0, len(blocks), per)):
        timecode = _uint(0xE7, k * cluster_ms)
        body.append(_element(0x1F43B675, timecode + b"".join(blocks[start : start + per])))
    segment = info + tracks + b"".join(body)
    return header + _element(0x18538067, segment, UNKNOWN_SIZE)


def pcm_block_clip(rate: float, size: int, *, channels: int = 1, doctype: str = "webm") -> bytes:
    """One SimpleBlock of ``size`` bytes of 16-bit PCM (a quiet tone) at ``rate``."""
    frame = struct.pack("<h", 1000) * channels + struct.pack("<h", -1000) * channels
    data = (frame * (size // len(frame) + 1))[:size]
    return matroska("A_PCM/INT/LIT", rate, channels, [block(data)], doctype=doctype, bits=16)


# --- Opus packets (PyAV's libopus) ----------------------------------------------------------


@functools.cache
def opus_packets(
    count: int = 50, bitrate: int = 6000, layout: str = "mono"
) -> tuple[tuple[bytes, ...], bytes]:
    """``count`` 20 ms Opus packets at 48 kHz and the OpusHead: a tone in mono, noise
    (the costliest to decode) in more channels."""
    import av

    encoder = av.CodecContext.create("libopus", "w")
    encoder.sample_rate = 48_000  # type: ignore[attr-defined]
    encoder.layout = layout  # type: ignore[attr-defined]
    encoder.format = "s16"  # type: ignore[attr-defined]
    encoder.bit_rate = bitrate
    encoder.open()
    channels = av.AudioLayout(layout).nb_channels
    noise = random.Random(8)
    packets: list[bytes] = []
    for n in range(count + 10):
        if channels == 1:
            samples = struct.pack(
                "<960h",
                *(
                    round(8000 * math.sin(2 * math.pi * 440 * (n * 960 + i) / 48_000))
                    for i in range(960)
                ),
            )
        else:
            samples = noise.randbytes(960 * 2 * channels)
        frame = av.AudioFrame(format="s16", layout=layout, samples=960)
        frame.planes[0].update(samples)
        frame.sample_rate = 48_000
        frame.pts = n * 960
        packets += [bytes(p) for p in encoder.encode(frame)]  # type: ignore[attr-defined]
    head = bytes(encoder.extradata or b"")
    return tuple(packets[:count]), head


def opus_webm(
    seconds: float, *, per_block: int = 1, bitrate: int = 6000, layout: str = "mono"
) -> bytes:
    """A WebM of ``seconds`` of Opus (50 packets repeated), ``per_block`` packets laced
    (Xiph) into each SimpleBlock, in clusters of at most 30 s (each the same blocks:
    an hour is made as fast as a minute)."""
    packets, head = opus_packets(bitrate=bitrate, layout=layout)
    channels = av_channels(layout)
    per_cluster = 1500 // per_block * per_block  # packets, a multiple of 50 when unlaced
    if per_block == 1:
        cluster = [block(packets[n % len(packets)], n * 20) for n in range(per_cluster)]
    else:
        group = [packets[n % len(packets)] for n in range(per_block)]
        laced = bytes([per_block - 1]) + b"".join(_xiph(len(p)) for p in group[:-1])
        laced += b"".join(group)
        cluster = [
            block(laced, k * per_block * 20, 0x80 | 0x02) for k in range(per_cluster // per_block)
        ]
    whole, rest = divmod(int(seconds * 50), per_cluster)
    blocks = cluster * whole + cluster[: math.ceil(rest / per_block)]
    return matroska(
        "A_OPUS",
        48_000.0,
        channels,
        blocks,
        private=head,
        per_cluster=len(cluster),
        cluster_ms=per_cluster * 20,
    )


def av_channels(layout: str) -> int:
    return {"mono": 1, "stereo": 2, "7.1": 8}[layout]


def _xiph(size: int) -> bytes:
    return b"\xff" * (size // 255) + bytes([size % 255])


def lying_block_duration() -> bytes:
    """2 s of Opus, each packet in a BlockGroup whose BlockDuration says 10^12 ms."""
    packets, head = opus_packets()
    groups = [
        _element(
            0xA0, _element(0xA1, _vint(1) + struct.pack(">hB", n * 20, 0) + p) + _uint(0x9B, 10**12)
        )
        for n, p in enumerate(packets[:100] * 2)
    ]
    return matroska("A_OPUS", 48_000.0, 1, groups, private=head)


def lying_lace_sizes() -> bytes:
    """Opus blocks whose EBML lacing declares frames far larger than the block."""
    packets, head = opus_packets()
    blocks = []
    for n in range(50):
        sizes = _vint(40_000_000) + _vint(0x3FFF, 2)  # first size, then a signed delta
        blocks.append(block(b"\x02" + sizes + b"".join(packets[:3]), n * 60, 0x80 | 0x06))
    return matroska("A_OPUS", 48_000.0, 1, blocks, private=head)


def enormous_block() -> bytes:
    """An Opus track whose one SimpleBlock declares 2^48 bytes (the file ends long before)."""
    packets, head = opus_packets()
    payload = _vint(1) + struct.pack(">hB", 0, 0x80) + packets[0] * 1000
    huge = b"\xa3" + _vint(1 << 48, 8) + payload
    return matroska("A_OPUS", 48_000.0, 1, [huge], private=head)


def zlib_blocks() -> bytes:
    """An Opus track whose blocks are zlib-compressed (ContentEncoding): each of the
    four inflates to 64 MiB of zeros."""
    _, head = opus_packets()
    encoding = _element(
        0x6D80, _element(0x6240, _uint(0x5032, 1) + _element(0x5034, _uint(0x4254, 0)))
    )
    blocks = [block(zeros_deflated(64), n * 20) for n in range(4)]
    file = matroska("A_OPUS", 48_000.0, 1, blocks, private=head)
    return file.replace(_text(0x86, "A_OPUS"), _text(0x86, "A_OPUS") + encoding, 1)


def opus_huge_block(size: int = 20 * MB) -> bytes:
    """An Opus track whose first SimpleBlock holds ``size`` bytes."""
    packets, head = opus_packets()
    data = random.Random(5).randbytes(size)
    return matroska(
        "A_OPUS", 48_000.0, 1, [block(data), *(block(p, 20) for p in packets)], private=head
    )


def enormous_codec_private() -> bytes:
    """A track whose CodecPrivate declares 200 MB and holds 2 MB."""
    packets, head = opus_packets()
    private = b"\x63\xa2" + _vint(200 * MB, 8) + head + bytes(2 * MB)
    file = matroska("A_OPUS", 48_000.0, 1, [block(p, n * 20) for n, p in enumerate(packets)])
    return file.replace(_text(0x86, "A_OPUS"), _text(0x86, "A_OPUS") + private, 1)


def many_channel_opus() -> bytes:
    """An Opus track declaring 64 channels (mapping family 255), fed mono packets."""
    packets, _ = opus_packets()
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 64, 312, 48_000, 0, 255)
    head += bytes([64, 0]) + bytes(range(64))
    return matroska(
        "A_OPUS", 48_000.0, 64, [block(p, n * 20) for n, p in enumerate(packets)], private=head
    )


# --- Ogg ---------------------------------------------------------------------------------------


_BITS_REVERSED = bytes(int(f"{n:08b}"[::-1], 2) for n in range(256))


def _ogg_crc(page: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04C11DB7, MSB first, no initial value or final XOR),
    by zlib's (the same polynomial, LSB first, with both): bytes and result reversed,
    and zlib's initial value taken out again (a CRC is linear). In C: fast at 20 MB."""
    raw = zlib.crc32(page.translate(_BITS_REVERSED)) ^ zlib.crc32(bytes(len(page)))
    return int(f"{raw:032b}"[::-1], 2)


def _ogg_page(
    flags: int, granule: int, serial: int, sequence: int, segments: list[int], body: bytes
) -> bytes:
    page = bytearray(b"OggS\0" + struct.pack("<BQIII", flags, granule, serial, sequence, 0))
    page += bytes([len(segments), *segments]) + body
    page[22:26] = struct.pack("<I", _ogg_crc(bytes(page)))
    return bytes(page)


def _ogg_pages(data: bytes) -> Iterator[bytearray]:
    at = 0
    while at < len(data):
        segments = data[at + 26]
        table = data[at + 27 : at + 27 + segments]
        end = at + 27 + segments + sum(table)
        yield bytearray(data[at:end])
        at = end


def ogg_opus(seconds: float) -> bytes:
    """``seconds`` of a tone as Ogg Opus, muxed by PyAV."""
    import av

    out = io.BytesIO()
    with av.open(out, mode="w", format="ogg") as target:
        stream = target.add_stream("libopus", rate=48_000, layout="mono")  # type: ignore[call-overload]
        stream.bit_rate = 16_000
        frame = av.AudioFrame(format="s16", layout="mono", samples=48_000)
        frame.planes[0].update(
            struct.pack(
                "<48000h",
                *(round(8000 * math.sin(2 * math.pi * 440 * i / 48_000)) for i in range(48_000)),
            )
        )
        frame.sample_rate = 48_000
        resampler = av.AudioResampler(format="flt", layout="mono", rate=48_000)
        for n in range(int(seconds)):
            frame.pts = n * 48_000
            for converted in resampler.resample(frame):
                converted.pts = None
                for packet in stream.encode(converted):
                    target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    return out.getvalue()


def bogus_granules() -> bytes:
    """3 s of Ogg Opus whose pages' granule positions jump (2^62, backwards, -1 ...)."""
    rng = random.Random(34)
    pages = []
    for n, page in enumerate(_ogg_pages(ogg_opus(3))):
        if n >= 2:  # the two header pages stay as they are
            granule = rng.choice([1 << 62, 0, 7, (1 << 63) - 1, 2**40, 2**64 - 2])
            page[6:14] = struct.pack("<Q", granule)
            page[22:26] = b"\0\0\0\0"
            page[22:26] = struct.pack("<I", _ogg_crc(bytes(page)))
        pages.append(bytes(page))
    return b"".join(pages)


def ogg_huge_packet(size: int = 20 * MB) -> bytes:
    """An Ogg Opus stream (PyAV's headers) whose first audio packet runs on over
    ``size`` bytes of pages (each page ends mid-packet: granule -1)."""
    pages = list(_ogg_pages(ogg_opus(1)))
    serial, sequence = struct.unpack("<II", bytes(pages[1][14:22]))
    out = [bytes(p) for p in pages[:2]]
    rng = random.Random(7)
    body = rng.randbytes(255 * 255)
    for n in range(size // len(body)):
        flags = 0x01 if n else 0x00  # continued (after the first)
        out.append(_ogg_page(flags, 2**64 - 1, serial, sequence + 1 + n, [255] * 255, body))
    return b"".join(out)


# --- zlib: a small stream that inflates to a declared size -------------------------------------


@functools.cache
def zeros_deflated(mib: int) -> bytes:
    """A zlib stream of ``mib`` MiB of zeros (about 1 KB a MiB), made without ever
    holding them: each MiB is flushed whole (``Z_FULL_FLUSH``), so all after the first
    compress to the same bytes, repeated."""
    chunk = bytes(MiB)
    packer = zlib.compressobj(9)
    first = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    adler = (mib * MiB % 65521) << 16 | 1  # Adler-32 of zeros: A stays 1, B counts them
    return first + again * (mib - 1) + b"\x03\x00" + struct.pack(">I", adler)


def _syncsafe(value: int) -> bytes:
    return bytes((value >> shift) & 0x7F for shift in (21, 14, 7, 0))


def id3_bomb(mib: int = 512) -> bytes:
    """An ID3v2.4 tag with one compressed title frame declaring (and inflating to)
    ``mib`` MiB."""
    payload = struct.pack(">I", mib * MiB) + zeros_deflated(mib)
    frame = b"TIT2" + _syncsafe(len(payload)) + b"\x00\x09" + payload  # zlib, length given
    return b"ID3\x04\x00\x00" + _syncsafe(len(frame)) + frame


# --- WAV -------------------------------------------------------------------------------------


def wav(
    rate: int,
    channels: int,
    data: bytes,
    *,
    bits: int = 16,
    block_align: int | None = None,
    data_size: int | None = None,
    riff_size: int | None = None,
) -> bytes:
    """A PCM WAV written by hand, every header field open to a lie."""
    align = block_align if block_align is not None else channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * align & 0xFFFFFFFF, align, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data) if data_size is None else data_size) + data
    return b"RIFF" + struct.pack("<I", len(body) if riff_size is None else riff_size) + body


def _tone_pcm(seconds: float, rate: int, channels: int = 1) -> bytes:
    """A 400 Hz tone, 16-bit: 20 ms computed (eight whole periods at any rate divisible
    by 50), then repeated (cheap at any length)."""
    count = rate // 50
    piece = [round(8000 * math.sin(2 * math.pi * 400 * i / rate)) for i in range(count)]
    chunk = struct.pack(f"<{count * channels}h", *(v for v in piece for _ in range(channels)))
    whole, rest = divmod(int(seconds * rate), count)
    return chunk * whole + chunk[: rest * 2 * channels]


def wav_with_id3(mib: int = 512) -> bytes:
    """2 s of 16 kHz speech-quiet tone whose WAV carries an ``id3 `` chunk: ``id3_bomb``."""
    tag = id3_bomb(mib)
    tag += b"\0" * (len(tag) % 2)
    body = wav(16_000, 1, _tone_pcm(2, 16_000))[12:] + b"id3 " + struct.pack("<I", len(tag)) + tag
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


# --- MP3 ---------------------------------------------------------------------------------------


def mp3(seconds: int, rate: int = 22_050, bitrate: int = 32_000) -> bytes:
    """A tone as MP3 (PyAV's libmp3lame)."""
    import av

    out = io.BytesIO()
    with av.open(out, mode="w", format="mp3") as target:
        stream = target.add_stream("libmp3lame", rate=rate, layout="mono")  # type: ignore[call-overload]
        stream.bit_rate = bitrate
        frame = av.AudioFrame(format="s16", layout="mono", samples=rate * seconds)
        frame.planes[0].update(_tone_pcm(seconds, rate))
        frame.sample_rate = rate
        resampler = av.AudioResampler(
            format=stream.codec_context.format.name, layout="mono", rate=rate
        )
        for converted in [*resampler.resample(frame), *resampler.resample(None)]:
            converted.pts = None
            for packet in stream.encode(converted):
                target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    return out.getvalue()


def _frames_only(data: bytes) -> bytes:
    """An MP3's frames without the ID3 tag in front (PyAV's muxer writes one)."""
    size = 0
    for byte in data[6:10]:
        size = size << 7 | byte
    return data[10 + size :] if data.startswith(b"ID3") else data


# --- MP4 (M4A) -------------------------------------------------------------------------------


def m4a_lying_sizes() -> bytes:
    """3 s of AAC in M4A (PyAV) whose sample table says each packet is 20 MB."""
    data = bytearray(_m4a(3))
    at = data.find(b"stsz")
    fixed, count = struct.unpack(">II", data[at + 8 : at + 16])
    assert fixed == 0, "PyAV wrote a constant sample size"
    for n in range(count):
        struct.pack_into(">I", data, at + 16 + 4 * n, 20 * MB)
    return bytes(data)


def cmov_bomb(mib: int = 512) -> bytes:
    """An M4A whose movie header is compressed (``cmov``), declaring (and inflating to)
    ``mib`` MiB of zeros."""

    def box(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", 8 + len(payload)) + kind + payload

    packed = box(b"dcom", b"zlib") + box(
        b"cmvd", struct.pack(">I", mib * MiB) + zeros_deflated(mib)
    )
    return box(b"ftyp", b"M4A \0\0\0\0M4A mp42") + box(b"moov", box(b"cmov", packed))


_MP4_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl"}


def _boxes(data: bytes) -> list[list[object]]:
    """MP4 boxes as ``[kind, body]``, the containers' bodies as lists of boxes."""
    boxes: list[list[object]] = []
    at = 0
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + size]
        boxes.append([kind, _boxes(body) if kind in _MP4_CONTAINERS else body])
        at += size
    return boxes


def _packed(boxes: list[list[object]]) -> bytes:
    out = []
    for kind, body in boxes:
        payload = _packed(body) if isinstance(body, list) else body  # type: ignore[arg-type]
        out.append(struct.pack(">I4s", 8 + len(payload), kind) + payload)  # type: ignore[arg-type]
    return b"".join(out)


def _box(boxes: list[list[object]], *path: bytes) -> list[object]:
    for kind in path:
        box = next(b for b in boxes if b[0] == kind)
        boxes = box[1]  # type: ignore[assignment]
    return box


def many_tracks(tracks: int = 1000, samples: int = 6000) -> bytes:
    """An M4A of ``tracks`` AAC tracks, each with a sample table of ``samples`` one-byte
    samples in one chunk: every table is indexed when the file is opened (24 MB of
    tables; each index under any one allocation's cap, together hundreds of MB)."""
    file = _boxes(_m4a(1))
    moov = _box(file, b"moov")
    trak = _box(moov[1], b"trak")  # type: ignore[arg-type]
    stbl = _box(trak[1], b"mdia", b"minf", b"stbl")  # type: ignore[arg-type]
    tables = {
        b"stts": struct.pack(">IIII", 0, 1, samples, 1024),
        b"stsc": struct.pack(">IIIII", 0, 1, 1, samples, 1),
        b"stsz": struct.pack(">III", 0, 0, samples) + struct.pack(">I", 1) * samples,
        b"stco": struct.pack(">III", 0, 1, 64),
    }
    for box in stbl[1]:  # type: ignore[union-attr]
        box[1] = tables.get(box[0], box[1])  # type: ignore[index]
    packed = _packed([trak])
    others = [b for b in moov[1] if b[0] != b"trak"]  # type: ignore[union-attr]
    body = _packed(others) + packed * tracks  # the same track id each time: still opened
    return b"".join(
        _packed([b]) if b[0] != b"moov" else struct.pack(">I4s", 8 + len(body), b"moov") + body
        for b in file
    )


def _m4a(seconds: int) -> bytes:
    import av

    out = io.BytesIO()
    with av.open(out, mode="w", format="ipod") as target:
        stream = target.add_stream("aac", rate=22_050, layout="mono")  # type: ignore[call-overload]
        frame = av.AudioFrame(format="s16", layout="mono", samples=22_050 * seconds)
        frame.planes[0].update(_tone_pcm(seconds, 22_050))
        frame.sample_rate = 22_050
        resampler = av.AudioResampler(format="fltp", layout="mono", rate=22_050)
        for converted in [*resampler.resample(frame), *resampler.resample(None)]:
            converted.pts = None
            for packet in stream.encode(converted):
                target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    return out.getvalue()


# --- the corpus ------------------------------------------------------------------------------


def _noise(head: bytes, size: int, seed: int) -> bytes:
    return head + random.Random(seed).randbytes(size - len(head))


@dataclass(frozen=True, slots=True)
class Hostile:
    """One clip of the corpus: how it is made and what ``probe`` must answer."""

    name: str
    make: Callable[[], bytes]
    expect: Outcome
    what: str
    why: str = ""
    """Words ``probe``'s refusal must say (which bound refused it)."""


CORPUS: tuple[Hostile, ...] = (
    # One PCM block at an odd rate: hours of sound in a frame (the three first).
    Hostile(
        "webm-pcm-1khz-2mb",
        lambda: pcm_block_clip(1000.0, 2 * MB),
        "NotAudio",
        "one 2 MB PCM block at 1,000 Hz: 1,000 s in one frame",
        "pcm_s16le is not a codec",
    ),
    Hostile(
        "webm-pcm-1khz-6mb",
        lambda: pcm_block_clip(1000.0, 6 * MB),
        "NotAudio",
        "the same, 6 MB",
        "pcm_s16le is not a codec",
    ),
    Hostile(
        "mkv-pcm-1khz-8mb",
        lambda: pcm_block_clip(1000.0, 8 * MB, doctype="matroska"),
        "NotAudio",
        "the same as Matroska, 8 MB",
        "pcm_s16le is not a codec",
    ),
    Hostile(
        "webm-pcm-8hz",
        lambda: pcm_block_clip(8.0, 64_000),
        "NotAudio",
        "64 KB of PCM at 8 Hz: 4,000 s, 64 M samples at 16 kHz",
        "pcm_s16le is not a codec",
    ),
    Hostile(
        "webm-pcm-384khz",
        lambda: pcm_block_clip(384_000.0, 2 * MB),
        "NotAudio",
        "2 MB of PCM at 384 kHz in one block",
        "pcm_s16le is not a codec",
    ),
    Hostile(
        "webm-pcm-48k-huge-frame",
        lambda: pcm_block_clip(48_000.0, 20 * MB),
        "NotAudio",
        "one 20 MB PCM frame at 48 kHz (208 s)",
        "pcm_s16le is not a codec",
    ),
    Hostile(
        "webm-pcm-64ch",
        lambda: pcm_block_clip(48_000.0, 4 * MB, channels=64),
        "NotAudio",
        "PCM in 64 channels",
        "pcm_s16le is not a codec",
    ),
    # Opus: many channels, long, costly, huge or zlib-compressed blocks.
    Hostile(
        "webm-opus-64ch",
        many_channel_opus,
        "NotAudio",
        "an Opus head declaring 64 channels",
        "64 channels",
    ),
    Hostile(
        "webm-opus-1h",
        lambda: opus_webm(3600),
        "TooLong",
        "an hour of 6 kbit/s Opus in 3.9 MB",
        "longer than 120.0 s",
    ),
    Hostile(
        "webm-opus-8ch-119s",
        lambda: opus_webm(119, bitrate=256_000, layout="7.1"),
        "NotAudio",
        "119 s of 8-channel Opus noise at 256 kbit/s: more CPU than any voice clip",
        "more than 1.5 s of CPU",
    ),
    Hostile(
        "webm-opus-20mb-block",
        opus_huge_block,
        "NotAudio",
        "an Opus track whose first block is 20 MB",
    ),
    Hostile(
        "webm-zlib-blocks",
        zlib_blocks,
        "NotAudio",
        "zlib-compressed Opus blocks, each inflating to 64 MiB",
    ),
    # Matroska's own tricks.
    Hostile(
        "webm-laced-opus-10min",
        lambda: opus_webm(600, per_block=255),
        "TooLong",
        "10 min of Opus, 255 packets laced into each block",
        "longer than 120.0 s",
    ),
    Hostile(
        "webm-lying-lace-sizes",
        lying_lace_sizes,
        "NotAudio",
        "EBML lacing declaring 40 MB frames in small blocks",
    ),
    Hostile(
        "webm-lying-block-duration",
        lying_block_duration,
        "NotAudio",
        "2 s of Opus in BlockGroups whose BlockDuration says 31 years",
        "a packet declaring 1000000000 s",
    ),
    Hostile(
        "webm-enormous-block",
        enormous_block,
        "NotAudio",
        "a SimpleBlock declaring 2^48 bytes",
    ),
    Hostile(
        "webm-enormous-codec-private",
        enormous_codec_private,
        "Sound",
        "a CodecPrivate declaring 200 MB (skipped: the 1 s after it is heard)",
    ),
    Hostile(
        "webm-truncated",
        lambda: opus_webm(5)[:3000],
        "Sound",
        "5 s of Opus cut off after 3 KB: the part that is there is heard",
    ),
    # Ogg.
    Hostile(
        "ogg-bogus-granules",
        bogus_granules,
        "Sound",
        "3 s of Ogg Opus whose granule positions jump and go backwards",
    ),
    Hostile(
        "ogg-20mb-packet",
        ogg_huge_packet,
        "NotAudio",
        "an Ogg Opus packet running on over 20 MB of pages",
        "Cannot allocate memory",
    ),
    # WAV.
    Hostile(
        "wav-8hz",
        lambda: wav(8, 1, _tone_pcm(1, 8000)),
        "NotAudio",
        "a WAV header saying 8 Hz over 16 KB",
        "a sample rate of 8 Hz",
    ),
    Hostile(
        "wav-384khz",
        lambda: wav(384_000, 1, _tone_pcm(3, 384_000)),
        "NotAudio",
        "3 s at 384 kHz",
        "a sample rate of 384000 Hz",
    ),
    Hostile(
        "wav-64ch",
        lambda: wav(48_000, 64, bytes(20 * MB)),
        "NotAudio",
        "20 MB of 64-channel PCM",
        "64 channels",
    ),
    Hostile(
        "wav-lying-header",
        lambda: wav(
            8000,
            1,
            _tone_pcm(60, 8000),
            block_align=65535,
            data_size=0xFFFFFFFF,
            riff_size=0xFFFFFFFF,
        ),
        "Sound",
        "sizes of 4 GB and a 65,535-byte block align (64 KB packets) over 60 s at 8 kHz",
    ),
    # zlib bombs in what FFmpeg reads before any packet: ID3 tags, a movie header.
    Hostile(
        "wav-id3-zlib-bomb",
        wav_with_id3,
        "Sound",
        "2 s of WAV with an id3 chunk whose compressed frame inflates to 512 MiB",
    ),
    Hostile(
        "mp3-id3-zlib-bomb",
        lambda: id3_bomb() + mp3(2),
        "Sound",
        "2 s of MP3 behind an ID3 tag whose compressed frame inflates to 512 MiB",
    ),
    Hostile(
        "m4a-cmov-zlib-bomb",
        cmov_bomb,
        "NotAudio",
        "a compressed movie header inflating to 512 MiB",
        "Cannot allocate memory",
    ),
    Hostile(
        "m4a-lying-sample-sizes",
        m4a_lying_sizes,
        "NotAudio",
        "3 s of AAC whose sample table says each packet is 20 MB",
    ),
    Hostile(
        "m4a-1000-tracks",
        many_tracks,
        "NotAudio",
        "1,000 AAC tracks of 6,000 samples each: 24 MB of sample tables to index",
    ),
    Hostile(
        "mp3-3h",
        lambda: _frames_only(mp3(20, 8000, 8000)) * 540,
        "TooLong",
        "3 hours of 8 kbit/s MP3 (20 s of frames, repeated)",
        "longer than 120.0 s",
    ),
    # Damaged containers.
    Hostile(
        "corrupt-webm",
        lambda: _noise(b"\x1a\x45\xdf\xa3", 2 * MB, 1),
        "NotAudio",
        "EBML magic, then 2 MB of noise",
    ),
    Hostile("corrupt-ogg", lambda: _noise(b"OggS", 2 * MB, 2), "NotAudio", "OggS, then noise"),
    Hostile(
        "corrupt-m4a",
        lambda: _noise(b"\0\0\0\x18ftypM4A ", 2 * MB, 3),
        "NotAudio",
        "an ftyp box, then 2 MB of noise",
    ),
    Hostile(
        "corrupt-mp3",
        lambda: _noise(b"ID3\x04\0\0\0\0\0\0", 2 * MB, 4),
        "NotAudio",
        "an ID3 tag, then 2 MB of noise",
    ),
    # Not hostile: the most PCM a clip may hold, which must still be taken.
    Hostile(
        "wav-119s-48k-stereo",
        lambda: wav(48_000, 2, _tone_pcm(119, 48_000, 2)),
        "Sound",
        "a genuine 119 s stereo WAV at 48 kHz (22.8 MB)",
    ),
)
"""The corpus, by name: each clip within ``MAX_BYTES`` and passing the sniff."""


def clip(name: str) -> bytes:
    return _made(name)


@functools.cache
def _made(name: str) -> bytes:
    return next(h for h in CORPUS if h.name == name).make()


# --- measuring a decode in a process of its own -------------------------------------------


@dataclass(frozen=True, slots=True)
class Measured:
    outcome: str
    """``Sound``, ``NotAudio``, ``TooLong``, or what else ended it (``MemoryError``, a
    signal, ``timeout``)."""
    detail: str
    peak_mb: float
    """Peak RSS above the baseline (the clip in memory, PyAV imported), MiB."""
    cpu_seconds: float
    wall_seconds: float


def measure(data: bytes, max_seconds: float = 120) -> Measured:
    """``audio.probe(data, max_seconds)`` in a process of its own, measured there."""
    return measure_all({"clip": data}, max_seconds)["clip"]


def measure_all(
    clips: dict[str, bytes], max_seconds: float = 120, workers: int | None = None
) -> dict[str, Measured]:
    """Each clip decoded by ``audio.probe`` in a process of its own, forked for it from
    an interpreter that has imported PyAV and ``shared.attachments.audio`` (one such
    interpreter per CPU, each forking for its share of the clips one after another): a
    clip costs its own decode, not an interpreter's start."""
    names = list(clips)
    workers = max(1, min(len(names), workers or os.cpu_count() or 2))
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for n, name in enumerate(names):
            path = Path(folder) / f"{n}.clip"
            path.write_bytes(clips[name])
            paths.append(str(path))
        shares = [list(range(first, len(names), workers)) for first in range(workers)]
        servers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.hostile_audio",
                    "--measure",
                    str(max_seconds),
                    *(paths[n] for n in share),
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for share in shares
        ]
        measured: dict[str, Measured] = {}
        for share, server in zip(shares, servers, strict=True):
            out, err = server.communicate()
            lines = out.splitlines()
            if server.returncode != 0 or len(lines) != len(share):
                raise RuntimeError(f"the measuring process failed: {err.strip()[-2000:]}")
            for n, line in zip(share, lines, strict=True):
                measured[names[n]] = Measured(**json.loads(line))
    return {name: measured[name] for name in names}


def _peak_mib() -> float:
    """This process's peak RSS so far, MiB: ``VmHWM``, not ``ru_maxrss``, which Linux
    carries over ``exec`` from the process that started it (its size, not ours)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _serve(max_seconds: float, paths: list[str]) -> None:
    """Fork a child for each clip in turn; print each child's measure, one JSON line."""
    import av  # noqa: F401  (in every child's baseline: imported before it is forked)

    from shared.attachments import audio  # noqa: F401

    for path in paths:
        read, write = os.pipe()
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child: measure, answer, and leave without cleaning up
            os.close(read)
            with os.fdopen(write, "w") as answer:
                answer.write(json.dumps(_decode_here(path, max_seconds)))
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as answer:
            said = answer.read()
        _, status = os.waitpid(pid, 0)
        if not said:
            ended = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else "no answer"
            wall = round(time.perf_counter() - started, 3)
            said = json.dumps(asdict(Measured(ended, "", math.nan, math.nan, wall)))
        print(said, flush=True)


def _decode_here(path: str, max_seconds: float) -> dict[str, object]:
    """In a forked child: ``audio.probe`` of the clip at ``path``, with its peak RSS
    above the baseline (the clip read, PyAV imported) and its CPU time. The address
    space is capped (``CAP_BYTES`` more) and the child ends after ``TIMEOUT_SECONDS``."""
    from shared.attachments import audio

    signal.alarm(int(TIMEOUT_SECONDS))
    data = Path(path).read_bytes()
    baseline, cpu, started = _peak_mib(), _cpu(), time.perf_counter()
    with open("/proc/self/statm") as statm:  # the address space now, in pages
        space = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + CAP_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (space, space))
    outcome, detail = "Sound", ""
    try:
        sound = audio.probe(data, max_seconds)
        detail = f"{sound.duration_seconds:.2f} s"
    except audio.TooLong as exc:
        outcome, detail = "TooLong", str(exc)
    except audio.NotAudio as exc:
        outcome, detail = "NotAudio", str(exc)
    except MemoryError:
        outcome, detail = "MemoryError", f"past {CAP_BYTES >> 20} MiB more address space"
    return {
        "outcome": outcome,
        "detail": detail[:200],
        "peak_mb": round(_peak_mib() - baseline, 1),
        "cpu_seconds": round(_cpu() - cpu, 3),
        "wall_seconds": round(time.perf_counter() - started, 3),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        _serve(float(sys.argv[2]), sys.argv[3:])
    else:
        from shared.attachment_rules import MAX_BYTES, sniff

        for hostile in CORPUS:
            made = clip(hostile.name)
            print(f"{hostile.name:<30}{len(made):>12,} B  {sniff(made[:12])}  {hostile.what}")
            assert len(made) <= MAX_BYTES and sniff(made[:12]) is not None, hostile.name
