"""The one place the benchmarks keep their figures: ``bench/results.json``.

Each benchmark runs its ``main`` inside ``recorded(name)``, which passes what it prints
through to the terminal and, when it ends without an error (and was run as ``make
bench`` runs it, with no arguments), keeps that report as the
benchmark's latest run, with the machine, the date and the commit. The documentation's
Benchmarks page is made from this file alone (``tools/docs.py``), so no figure is ever
typed by hand; commit the file when a run is worth keeping.

A figure that has a target is printed by ``target``, which also keeps it (with ours, the
floor's and the peers' figures of the same run) for the page's table of targets.
"""

from __future__ import annotations

import io
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

RESULTS = Path(__file__).resolve().parent / "results.json"

_targets: list[dict[str, Any]] = []


def target(figure: str, ours: str, goal: str, met: bool, beside: str = "") -> None:
    """Print ``figure``'s line (ours, the ``goal``, met or not, and ``beside``: the floor's
    and the peers' figures measured in the same run) and keep it for the results file."""
    verdict = "met" if met else "not met"
    print(
        f"  target: {figure}: {ours} (target {goal}: {verdict})" + (f"; {beside}" if beside else "")
    )
    _targets.append({"figure": figure, "ours": ours, "target": goal, "met": met, "beside": beside})


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, terminal: TextIO) -> None:
        self.terminal = terminal
        self.kept = io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.terminal.write(text)

    def flush(self) -> None:
        self.terminal.flush()


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    processor = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    processor = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "processor": processor,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=RESULTS.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def record(
    name: str, report: str, path: Path = RESULTS, targets: list[dict[str, Any]] | None = None
) -> None:
    """Keep ``report`` (and its ``targets``, from ``target``) as the latest run of the
    benchmark ``name``."""
    results: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    results[name] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "machine": machine(),
        "report": report,
    }
    if targets:
        results[name]["targets"] = targets
    path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")


@contextmanager
def recorded(name: str, path: Path = RESULTS) -> Iterator[None]:
    """Run the block with its output kept, and record it if the block succeeds. A run
    given arguments (``--only c``, a smaller sample) is a partial one: nothing is kept."""
    _targets.clear()
    if sys.argv[1:]:
        yield
        return
    tee = _Tee(sys.stdout)
    with redirect_stdout(tee):  # type: ignore[type-var]
        yield
    record(name, tee.kept.getvalue(), path, list(_targets))
