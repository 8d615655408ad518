"""What offline voice costs, and how well it hears: the local Whisper model
(``shared/voice/whisper_local.py``) on clips espeak-ng speaks, and espeak-ng reading a
reply (``shared/voice/espeak_voice.py``).

    .venv/bin/python bench/offline_voice.py [--repeat 3]

* For a clip of about 5 s, the passage the e2e test speaks (about 11 s) and the passage
  said again and again to just under the 120 s limit: the clip is decoded as the api
  decodes it (``audio_worker.decode``, WebM Opus in, 16 kHz WAV out), then transcribed by the
  worker (``whisper_worker``) in a process of its own, with the adapter's limits: its
  peak RSS (the model loaded and the clip transcribed), its CPU time and wall time
  (median of ``--repeat``), and the word error rate of what it heard against what
  was said.
* espeak-ng reading the passage: wall time and the bytes of WAV it made.

Needs ``make setup`` (the offline-voice virtualenv and espeak-ng).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from shared.attachments import audio_worker  # noqa: E402
from shared.voice import whisper_local  # noqa: E402
from shared.voice.espeak_voice import EspeakVoice  # noqa: E402
from tests.voice_samples import PASSAGE, said, word_error_rate  # noqa: E402

FIVE_SECONDS = (
    "Please make me a lesson about the water cycle for my class of nine year olds and their "
    "parents."
)


def transcribed(wav: bytes) -> tuple[str, float, float, float]:
    """What the worker heard in ``wav``, its peak RSS (MiB), CPU and wall seconds."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [
            str(whisper_local.VENV / "bin" / "python"),
            "-m",
            "shared.voice.whisper_worker",
            str(len(wav)),
            str(whisper_local.CHILD_MEMORY_BYTES),
            str(whisper_local.CHILD_CPU_SECONDS),
            str(whisper_local.THREADS),
        ],
        cwd=ROOT,
        env=whisper_local.CHILD_ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(wav)
    child.stdin.close()
    out = child.stdout.read()
    # wait4, not wait: the kernel's account of this child alone (peak RSS, CPU).
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = status
    wall = time.perf_counter() - started
    lines = [line for line in out.decode().splitlines() if line]
    if status or not lines or '"done"' not in lines[-1]:
        raise SystemExit(f"the worker failed (status {status}): {out[-300:]!r}")
    heard = "".join(json.loads(line).get("text", "") for line in lines)
    return heard.strip(), usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if whisper_local.WhisperTranscriber.find() is None or not shutil.which("espeak-ng"):
        raise SystemExit("offline voice is not installed: run make setup")

    long_text = " ".join([PASSAGE] * 12)
    clips = {"about 5 s": FIVE_SECONDS, "the passage": PASSAGE, "near 120 s": long_text}
    print(
        f"The local model ({whisper_local.MODEL}, {whisper_local.THREADS} thread) on "
        f"espeak-ng's voice, median of {args.repeat}"
    )
    print(f"  {'clip':<14}{'seconds':>8}{'peak MiB':>10}{'CPU s':>8}{'wall s':>8}{'WER':>7}")
    for name, text in clips.items():
        sound = asyncio.run(audio_worker.decode(said(text), 120))
        runs = [transcribed(sound.wav) for _ in range(args.repeat)]
        heard = runs[0][0]
        peak = max(run[1] for run in runs)
        cpu = statistics.median(run[2] for run in runs)
        wall = statistics.median(run[3] for run in runs)
        rate = word_error_rate(text, heard)
        print(
            f"  {name:<14}{sound.duration_seconds:8.1f}{peak:10.0f}{cpu:8.2f}{wall:8.2f}{rate:7.2f}"
        )
        if name != "near 120 s":
            print(f"    said:  {text}\n    heard: {heard}")

    async def speak() -> int:
        return sum([len(chunk) async for chunk in EspeakVoice().speak(PASSAGE)])

    started = time.perf_counter()
    made = asyncio.run(speak())
    print(
        f"\nespeak-ng reading the passage: {time.perf_counter() - started:.2f} s, "
        f"{made / 1e3:.0f} kB of WAV"
    )


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("offline_voice"):
        main()
