"""What decoding a voice clip costs, clip by clip of the hostile corpus, beside a normal
60 s spoken clip, against the bound: at most 64 MiB of peak RSS above the baseline and
2 s of CPU per clip.

    .venv/bin/python bench/audio_decode.py [--only NAME ...] [--repeat 3]

* Each clip of ``tests/hostile_audio.py`` (made here, nothing downloaded) and the
  spoken clip (espeak-ng's sentence said again and again as WebM Opus, what a browser
  records; a tone if espeak-ng is missing) is decoded by ``audio.probe`` in a process
  of its own, forked from one that has imported PyAV: its peak RSS above its baseline
  (``VmHWM``; the clip read, PyAV imported) and its CPU time, with what ``probe``
  answered. Met or not met against each bound.
* The api's path, ``audio_worker.decode`` (``probe`` in a child process with its limits):
  wall time and the child's CPU for the spoken clip and a 3 s one, median of
  ``--repeat``, beside ``probe`` in this process; the difference is what the isolation
  costs (an interpreter and PyAV started for each clip).

Prints only (the benchmarks keep no results file).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from shared.attachments import audio, audio_worker  # noqa: E402
from tests.hostile_audio import CORPUS, Measured, clip, measure_all, opus_webm  # noqa: E402

PEAK_MIB = 64
CPU_SECONDS = 2.0
SPOKEN = "speech-60s-webm"


def spoken_clips() -> tuple[bytes, bytes, str]:
    """About 60 s and 3 s of speech as WebM Opus, and what they are."""
    if shutil.which("espeak-ng"):
        from tests.voice_samples import longer_than, spoken

        said = "espeak-ng's sentence, again and again"
        return longer_than(58, "audio/webm"), spoken("audio/webm"), said
    tone = "a 440 Hz tone (espeak-ng is not installed)"
    return opus_webm(60, bitrate=24_000), opus_webm(3, bitrate=24_000), tone


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(work: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall seconds of ``work``, and median CPU seconds of the children it ran."""
    walls, cpus = [], []
    for _ in range(repeat):
        cpu, started = children_cpu(), time.perf_counter()
        work()
        walls.append(time.perf_counter() - started)
        cpus.append(children_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def verdict(got: Measured) -> str:
    memory = "met" if got.peak_mb <= PEAK_MIB else "NOT MET"
    cpu = "met" if got.cpu_seconds <= CPU_SECONDS else "NOT MET"
    return f"{memory:>8} {cpu:>8}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="clips of the corpus to measure")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    spoken, short, said = spoken_clips()
    names = args.only or [h.name for h in CORPUS]
    clips = {SPOKEN: spoken, **{name: clip(name) for name in names}}
    what = {SPOKEN: f"{len(spoken) / 1e6:.1f} MB: {said}"}
    what.update({h.name: h.what for h in CORPUS})
    measured = measure_all(clips)

    print(
        f"Decoding each clip in a process of its own: peak RSS above the baseline (MiB) "
        f"and CPU (s); bounds {PEAK_MIB} MiB, {CPU_SECONDS:g} s"
    )
    print(
        f"  {'clip':<28}{'bytes':>12}  {'answer':<9}{'MiB':>7}{'CPU s':>8}"
        f"{'memory':>9}{'CPU':>9}   what"
    )
    met = 0
    for name, got in measured.items():
        met += got.peak_mb <= PEAK_MIB and got.cpu_seconds <= CPU_SECONDS
        print(
            f"  {name:<28}{len(clips[name]):>12,}  {got.outcome:<9}{got.peak_mb:7.1f}"
            f"{got.cpu_seconds:8.3f}{verdict(got)}   {what[name]}"
        )
    print(f"  both bounds met by {met} of {len(measured)} clips")

    if not hasattr(audio, "decode"):  # the code before issue 34 decoded in the api
        return
    print(f"\nThe api's path (probe in a child process), median of {args.repeat}")
    print(f"  {'clip':<28}{'in this process':>17}{'in a child':>12}{'child CPU':>11}")
    for name, data in ((SPOKEN, spoken), ("speech-3s-webm", short)):
        here, _ = timed(lambda data=data: audio.probe(data, 120), args.repeat)
        child, cpu = timed(
            lambda data=data: asyncio.run(audio_worker.decode(data, 120)), args.repeat
        )
        print(f"  {name:<28}{here:15.3f} s{child:10.3f} s{cpu:9.3f} s")


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("audio_decode"):
        main()
