"""What the egress's screen costs a request once something is withheld (DESIGN §13).

    .venv/bin/python bench/screen.py [--repeat 7]

No emulators. Thirty withheld messages (and one in Chinese); then each window below
screened whole, as ``screened`` does before every request of a user whose model was
given a withheld author's words: the best of ``--repeat`` runs, per window and per
character. English prose of ~115,000 characters (about what ``SPARK_HISTORY_CHARS``
lets a window hold), the same with curly apostrophes (its non-ASCII characters take the
slower path), the same as HTML, and Chinese of 30,000 characters (each character a
token of its own). Then the first look-alike letter a process reads, which loads the
confusables table, timed in a fresh process.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from bench.results import recorded  # noqa: E402
from shared.egress.words import Withheld  # noqa: E402

COMMON = "the a of to and in is it you that he was for on are with as at one have this from"
HAN = "山水花鸟风月云雨雪星日天地人口手心火木金土石田川林竹米车马牛羊鱼的了是在我有他这"
FIRST_LOOK_ALIKE = (
    "import time; from shared.egress.words import Withheld; w = Withheld.of(['a b c']); "
    "t = time.perf_counter(); w.text('раss it on'); print(time.perf_counter() - t)"
)


def prose(words: int, rng: random.Random) -> str:
    vocabulary = COMMON.split() + [f"w{i}x" for i in range(500)]
    out = [rng.choice(vocabulary) + ("." if i % 12 == 11 else "") for i in range(words)]
    return " ".join(out)


def best(screen: Withheld, text: str, repeat: int) -> float:
    screen.text(text)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        screen.text(text)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    repeat = parser.parse_args().repeat
    rng = random.Random(1)
    chinese = "".join(rng.choice(HAN) for _ in range(30_000))
    withheld = [prose(20, rng) + " at 4:30pm, code 7731" for _ in range(30)] + [chinese[:40]]
    screen = Withheld.of(withheld)
    english = prose(20_000, rng)
    windows = {
        "English prose": english,
        "with curly apostrophes": english.replace(" it ", " it’s "),
        "as HTML": english.replace(". ", ".</p><p>").replace(" the ", " <b>the</b> "),
        "Chinese": chinese,
    }
    print(f"{len(withheld)} messages withheld; each window screened whole, best of {repeat}")
    for name, text in windows.items():
        seconds = best(screen, text, repeat)
        per_char = seconds / len(text) * 1e6
        print(f"  {name:24} {len(text):8,} chars  {seconds * 1e3:7.1f} ms  {per_char:5.2f} µs/char")
    loaded = subprocess.run(
        [sys.executable, "-c", FIRST_LOOK_ALIKE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    first = float(loaded.stdout) * 1e3
    print(f"  the first look-alike letter in a process (loads the table): {first:.0f} ms")


if __name__ == "__main__":
    with recorded("screen"):
        main()
