"""A voice clip decoded in a child process (``audio.decode`` starts it).

    python -m shared.attachments.audio_worker MAX_SECONDS SIZE MEMORY_BYTES CPU_SECONDS < clip

Reads the clip's ``SIZE`` bytes from stdin, then caps its own address space at what it
holds then plus ``MEMORY_BYTES`` and its CPU time at ``CPU_SECONDS`` more than it has
spent, and runs ``audio.probe``. Writes one line of JSON, ``{"seconds", "loudestDbfs"}``
followed by the 16 kHz WAV, or ``{"tooLong": seconds}`` or ``{"notAudio": why}``. A
limit it reaches ends it without an answer (SIGXCPU, or an allocation refused: PyAV
raises, and the clip is not audio), which the parent takes as not audio.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys

from shared.attachments import audio


def _address_space() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def limit(memory_bytes: int, cpu_seconds: int) -> None:
    """Cap this process from now on: ``memory_bytes`` more address space, and
    ``cpu_seconds`` more CPU time (whole seconds, as the kernel counts them)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = math.ceil(usage.ru_utime + usage.ru_stime) + cpu_seconds
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU would dump a core
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    space = _address_space() + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (space, space))


def main() -> None:
    max_seconds, size = float(sys.argv[1]), int(sys.argv[2])
    memory_bytes, cpu_seconds = int(sys.argv[3]), int(sys.argv[4])
    audio.prepare()  # PyAV imported (and FFmpeg's allocations capped) before the limits
    data = bytearray(size)  # read into once: never twice its size, as read() would
    read = 0
    with open(sys.stdin.fileno(), "rb", buffering=0, closefd=False) as stdin:
        while read < size and (got := stdin.readinto(memoryview(data)[read:])):
            read += got
    limit(memory_bytes, cpu_seconds)
    head, wav = audio.answer(memoryview(data)[:read], max_seconds)
    out = sys.stdout.buffer
    out.write(json.dumps(head).encode() + b"\n")
    out.write(wav)
    out.flush()


if __name__ == "__main__":
    main()
