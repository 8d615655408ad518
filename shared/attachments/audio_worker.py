"""A voice clip decoded in a child process: ``decode`` starts it, ``main`` is the child.

    python -m shared.attachments.audio_worker MAX_SECONDS SIZE MEMORY_BYTES CPU_SECONDS < clip

Reads the clip's ``SIZE`` bytes from stdin, then caps its own address space at what it
holds then plus ``MEMORY_BYTES`` and its CPU time at ``CPU_SECONDS`` more than it has
spent, and runs ``audio.probe``. Writes one line of JSON, ``{"seconds", "loudestDbfs"}``
followed by the 16 kHz WAV, or ``{"tooLong": seconds}`` or ``{"notAudio": why}``. A
limit it reaches ends it without an answer (SIGXCPU, or an allocation refused: PyAV
raises, and the clip is not audio), which the parent takes as not audio.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import sys
from typing import Any

from shared.attachments import audio
from shared.attachments.audio import Buffer, NotAudio, Sound, TooLong, probe

TIMEOUT_SECONDS = 20.0
"""Wall-clock time a child may take: its CPU limit at a third of a CPU, and more."""
CHILD_CPU_SECONDS = 3
"""CPU seconds the child may spend after starting (SIGXCPU past it)."""
CHILD_MEMORY_BYTES = 128 * 1024 * 1024
"""Address space the child may add once PyAV is imported and the clip read."""


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


async def decode(
    data: bytes,
    max_seconds: float,
    *,
    limit_seconds: float = TIMEOUT_SECONDS,
    memory_bytes: int = CHILD_MEMORY_BYTES,
    cpu_seconds: int = CHILD_CPU_SECONDS,
) -> Sound:
    """``probe(data, max_seconds)`` in a child process (``audio_worker``) whose address
    space may grow by ``memory_bytes`` and whose CPU time is capped at ``cpu_seconds``;
    it is killed after ``limit_seconds`` (or when this is cancelled).

    Raises:
        NotAudio: as ``probe``; or the child was stopped by a limit.
        TooLong: as ``probe``.
    """
    import asyncio  # here, not above: the child imports this module, and not asyncio

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "shared.attachments.audio_worker",
        repr(float(max_seconds)),
        str(len(data)),
        str(memory_bytes),
        str(cpu_seconds),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(data), limit_seconds)
    except TimeoutError:
        raise NotAudio(f"not decoded within {limit_seconds:g} s") from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    head, _, wav = out.partition(b"\n")
    try:
        if process.returncode != 0:  # killed (a limit) or crashed: whatever it wrote
            raise ValueError(head[:200])
        result = json.loads(head)
    except ValueError:
        raise NotAudio(f"the decoder stopped (exit status {process.returncode})") from None
    if result.get("tooLong") is not None:
        raise TooLong(float(result["tooLong"]))
    if "notAudio" in result:
        raise NotAudio(str(result["notAudio"]))
    loudest = result["loudestDbfs"]
    return Sound(float(result["seconds"]), -math.inf if loudest is None else loudest, wav)


def answer(data: Buffer, max_seconds: float) -> tuple[dict[str, Any], bytes]:
    """What the child writes for ``data``: a JSON head and (a Sound) its WAV."""
    try:
        sound = probe(data, max_seconds)
    except TooLong as exc:
        return {"tooLong": exc.seconds}, b""
    except NotAudio as exc:
        return {"notAudio": str(exc)}, b""
    loudest = sound.loudest_dbfs if math.isfinite(sound.loudest_dbfs) else None
    return {"seconds": sound.duration_seconds, "loudestDbfs": loudest}, sound.wav


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
    head, wav = answer(memoryview(data)[:read], max_seconds)
    out = sys.stdout.buffer
    out.write(json.dumps(head).encode() + b"\n")
    out.write(wav)
    out.flush()


if __name__ == "__main__":
    main()
