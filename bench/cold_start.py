"""Cold start: what an instance pays before its first request, side by side with the
framework alone.

Run with ``make bench`` (it starts the emulators). Prints:

Both run on the packages a deployed function has: those of the development group alone
(``uv.lock``; ``tools/package.py`` exports ``--no-dev``) are refused in the measured
processes, as they are absent there. httpx (which firebase-admin imports, now only with
``SPARK_CHECK_REVOKED``) otherwise loads its command-line client because rich and
pygments (pytest's, schemathesis') are installed: ~0.23 s here that no instance pays.

(a) ``import main`` (the entry of both functions, as each deployed function imports it,
    ``FUNCTION_TARGET`` set) beside ``import functions_framework.aio`` alone, each in a
    fresh process, interleaved, median of ``--runs``: wall time of the whole process
    (interpreter start included, the same on both sides), its CPU and its peak RSS;
    target: ``import main`` <= 1.5x the framework. Twice: as deployed (every module
    imported has its bytecode, as an instance has: pip compiles the requirements it
    installs, and the archive ships ours) and from source (nothing compiled; this
    machine sets ``PYTHONDONTWRITEBYTECODE``, so a fresh checkout compiles every module
    on every import, ours and the libraries').
(b) the ``api`` function started as Cloud Functions would (functions-framework, ASGI):
    time until its port accepts connections, then its first request (a message whose
    reply is one token from a lean fake model) beside the second and third, each from
    a user signed in beforehand; target: the first within 1.2x of the second. Also its
    RSS after that. One extra start first warms the emulators (and writes the bytecode
    the others read, as (a)'s "as deployed") and is not counted.
(c) from process start to the first token of the first request: the ``api`` function
    (as in (b)) beside each peer of ``bench/stream_overhead.py`` (``bench/peers.py``:
    the OpenAI Agents SDK, Pydantic AI and the floor, each served by uvicorn as ours
    is), the same one-token reply from the same fake model, each started ``--starts``
    times in turn with its bytecode written by a first start that is not counted;
    target: ours no later than each peer's (the floor's is shown beside).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from tools.stack import Stack, cpu_seconds, free_port, sign_up  # noqa: E402

IMPORT_TARGET = 1.5
FIRST_REQUEST_TARGET = 1.2


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dev_only_modules(lock: Path = ROOT / "uv.lock") -> list[str]:
    """The top-level modules installed only for development: their distributions are
    not among the project's dependencies (with their extras) and theirs, in ``lock``."""
    packages = {_norm(p["name"]): p for p in tomllib.loads(lock.read_text())["package"]}

    def wanted(deps: list[dict[str, object]]) -> list[tuple[str, tuple[str, ...]]]:
        return [(_norm(str(d["name"])), tuple(d.get("extra", ()))) for d in deps]

    todo, seen = wanted(packages["spark-agent"]["dependencies"]), set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen or name not in packages:
            continue
        seen.add((name, extras))
        package = packages[name]
        deps = list(package.get("dependencies", []))
        for extra in extras:
            deps += package.get("optional-dependencies", {}).get(extra, [])
        todo += wanted(deps)
    runtime = {name for name, _ in seen} | {"spark-agent"}
    return sorted(
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if module.isidentifier() and not module.startswith("_")
        if all(_norm(dist) not in runtime for dist in dists)
    )


def deployed(code: str) -> list[str]:
    """``python -c code`` with the development group's modules absent, as deployed."""
    refused = f"sys.modules.update(dict.fromkeys({dev_only_modules()!r}))"
    return [sys.executable, "-c", f"import sys; {refused}; {code}"]


def verdict(met: bool) -> str:
    return "met" if met else "not met"


def timed_import(module: str, env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of a fresh ``python -c "import module"``."""
    started = time.perf_counter()
    process = subprocess.Popen(deployed(f"import {module}"), cwd=ROOT / "functions", env=env)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if status:
        raise SystemExit(f"import {module} failed (status {status})")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def imports(runs: int, env: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-bytecode-") as cache:
        # What an instance has: the requirements compiled (pip compiles what it installs)
        # and our modules compiled (``tools/package.py`` ships their bytecode). Compiled
        # once here, by importing each side with this cache, then only read.
        compiled = {**env, "PYTHONPYCACHEPREFIX": cache}
        for module, target in (
            ("functions_framework.aio", "api"),
            ("main", "api"),
            ("main", "tasks"),
        ):
            writing = {**compiled, "FUNCTION_TARGET": target}
            writing.pop("PYTHONDONTWRITEBYTECODE", None)
            timed_import(module, writing)
        for title, side_env in (
            (
                "as deployed (the requirements and our modules compiled)",
                {**compiled, "PYTHONDONTWRITEBYTECODE": "1"},
            ),
            (
                "from source (nothing compiled, as in a fresh checkout)",
                {**env, "PYTHONDONTWRITEBYTECODE": "1"},
            ),
        ):
            _imports(runs, title, side_env)


def _imports(runs: int, title: str, env: dict[str, str]) -> None:
    sides = {
        "functions_framework.aio": ("functions_framework.aio", env),
        "import main (api)": ("main", {**env, "FUNCTION_TARGET": "api"}),
        "import main (tasks)": ("main", {**env, "FUNCTION_TARGET": "tasks"}),
    }
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    for _ in range(runs):  # interleaved, so the machine's load falls on every side alike
        for name, (module, side_env) in sides.items():
            results[name].append(timed_import(module, side_env))
    print(f"(a) import in a fresh process, {title}, median of {runs} (interleaved):")
    base = [
        statistics.median(column)
        for column in zip(*results["functions_framework.aio"], strict=True)
    ]
    for name, rows in results.items():
        wall, cpu, rss = (statistics.median(column) for column in zip(*rows, strict=True))
        line = f"    {name:24s} wall {wall:5.2f} s | CPU {cpu:5.2f} s | RSS {rss:5.0f} MB"
        if name != "functions_framework.aio":
            ratio = wall / base[0]
            line += (
                f" | {ratio:4.2f}x the framework's wall, {cpu / base[1]:4.2f}x its CPU "
                f"(target <= {IMPORT_TARGET}x: {verdict(ratio <= IMPORT_TARGET)})"
            )
        print(line)


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the api function exited with status {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.01)
    raise SystemExit(f"the api function did not listen on {port} in {timeout:.0f} s")


def message(port: int, token: str) -> float:
    """Seconds to send one message and read its whole streamed reply."""
    body = json.dumps({"text": "tokens=1 rate=0"}).encode()
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(
            b"POST /api/spark/agent/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n".encode()
            + b"Connection: close\r\n\r\n"
            + body
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    if not reply.startswith(b"HTTP/1.1 200") or b"event: done" not in reply:
        raise SystemExit(f"the message failed: {reply[:400]!r}")
    return time.perf_counter() - started


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children (the uvicorn worker), MB."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
        except OSError:
            continue
        if status.parent.name == str(pid) or fields.get("PPid", "").strip() == str(pid):
            total += int(fields.get("VmRSS", "0 kB").split()[0])
    return total / 1024


def first_requests(starts: int) -> None:
    stack = Stack(Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="bench-")))
    provider_port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        # Bytecode as an instance has it (see (a)), in a cache of its own: written by the
        # first start (not counted), read by the others.
        "PYTHONPYCACHEPREFIX": (cache := tempfile.mkdtemp(prefix="bench-bytecode-")),
        "PYTHONUNBUFFERED": "1",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{provider_port}/v1",
        "OPENAI_API_KEY": "bench",
        "SPARK_MODEL": "bench",
        "SPARK_TASKS_URL": f"http://127.0.0.1:{free_port()}/",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'functions'}",  # this tree's code, whichever is installed
    }
    auth_host = os.environ["FIREBASE_AUTH_EMULATOR_HOST"]
    tokens = [sign_up(auth_host, f"cold-{n}@example.com", "bench-pass").token for n in range(3)]
    fake = [sys.executable, str(ROOT / "bench" / "fake_provider.py"), f"--port={provider_port}"]
    # The `functions-framework` command, in a process without the development group.
    framework = deployed("from functions_framework._cli import _cli; sys.exit(_cli())")
    rows = []
    try:
        stack.spawn("bench-provider", fake)
        # The first start's figures are dropped: it warms the emulators (the Firestore
        # emulator's first query in its life takes ~1.6 s here), not our code, and it
        # compiles the modules.
        for n in range(starts + 1):
            port = free_port()
            argv = [*framework, "--target=api", f"--source={ROOT / 'functions' / 'main.py'}"]
            argv += ["--asgi", "--host=127.0.0.1", f"--port={port}"]
            started = time.perf_counter()
            # (``Stack.spawn`` passes this process's environment, with this switch.)
            writes = os.environ.pop("PYTHONDONTWRITEBYTECODE", None) if n == 0 else None
            try:
                stack.spawn(f"api-{n}", argv, env=env)
            finally:
                if writes is not None:
                    os.environ["PYTHONDONTWRITEBYTECODE"] = writes
            process = dict(stack.processes)[f"api-{n}"]
            wait_for_port(port, process)
            listening = time.perf_counter() - started
            times, cpus = [], []
            for token in tokens:
                before = cpu_seconds(process.pid)
                times.append(message(port, token))
                time.sleep(0.3)  # the run's work after its last byte (its watchdog) counts too
                cpus.append(cpu_seconds(process.pid) - before)
            rows.append((listening, *times, *cpus, rss_mb(process.pid)))
            stack.stop([f"api-{n}"])
    finally:
        stack.stop()
        shutil.rmtree(cache, ignore_errors=True)
    listening, first, second, third, *cpus, rss = (
        statistics.median(c) for c in zip(*rows[1:], strict=True)
    )
    ratio = first / second
    print(f"(b) the api function started {starts} times, median:")
    print(
        f"    listening after {listening:5.2f} s | first request {first * 1e3:6.0f} ms "
        f"| second {second * 1e3:6.0f} ms | third {third * 1e3:6.0f} ms | RSS {rss:4.0f} MB"
    )
    print(
        "    api CPU per request (incl. the 0.3 s after it): "
        + " | ".join(f"{cpu * 1e3:5.0f} ms" for cpu in cpus)
        + f" -> first / second {cpus[0] / max(cpus[1], 1e-3):4.1f}x"
    )
    print(
        f"    first / second request {ratio:4.2f}x "
        f"(target <= {FIRST_REQUEST_TARGET}x: {verdict(ratio <= FIRST_REQUEST_TARGET)})"
    )
    print(f"    start-up + first request {listening + first:5.2f} s")


PEERS_PYTHON = ROOT / ".bench-peers" / "bin" / "python"
PEERS = {"agents": "OpenAI Agents SDK", "pydantic-ai": "Pydantic AI", "relay": "floor (bare relay)"}
OURS = "ours (api)"


def first_token(port: int, path: str, body: bytes, headers: str, timeout: float = 60) -> float:
    """Send one message to a server that is listening; when its first token arrived
    (``time.perf_counter``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\n{headers}Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
            if b"event: text\n" in reply:
                return time.perf_counter()
    raise SystemExit(f"no token in the first reply: {reply[:400]!r}")


def to_first_token(starts: int) -> None:
    """(c): each side started ``starts`` times in turn (and once more first, not
    counted), from its process's start to the first token of its first request."""
    stack = Stack(Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="bench-")))
    provider_port = free_port()
    provider = f"http://127.0.0.1:{provider_port}/v1"
    cache = tempfile.mkdtemp(prefix="bench-bytecode-")
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPYCACHEPREFIX": cache,  # as (b): written by the first start, then read
        "PYTHONUNBUFFERED": "1",
        "OPENAI_BASE_URL": provider,
        "OPENAI_API_KEY": "bench",
        "SPARK_MODEL": "bench",
        "SPARK_TASKS_URL": f"http://127.0.0.1:{free_port()}/",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'functions'}",
    }
    auth_host = os.environ["FIREBASE_AUTH_EMULATOR_HOST"]
    framework = deployed("from functions_framework._cli import _cli; sys.exit(_cli())")
    body = json.dumps({"text": "tokens=1 rate=0"}).encode()

    def command(side: str, port: int) -> tuple[list[str], str, str]:
        if side == OURS:
            token = sign_up(auth_host, f"cold-first-{port}@example.com", "bench-pass").token
            argv = [*framework, "--target=api", f"--source={ROOT / 'functions' / 'main.py'}"]
            argv += ["--asgi", "--host=127.0.0.1", f"--port={port}"]
            return argv, "/api/spark/agent/messages", f"Authorization: Bearer {token}\r\n"
        script = str(ROOT / "bench" / "peers.py")
        argv = [str(PEERS_PYTHON), script, f"--peer={side}", f"--port={port}"]
        return [*argv, f"--provider={provider}"], "/messages", ""

    sides = [OURS, *(PEERS if PEERS_PYTHON.exists() else ())]
    if len(sides) == 1:
        print(f"(c) peers not measured: {PEERS_PYTHON.relative_to(ROOT)} is missing")
    times: dict[str, list[float]] = {side: [] for side in sides}
    try:
        stack.spawn(
            "bench-provider",
            [sys.executable, str(ROOT / "bench" / "fake_provider.py"), f"--port={provider_port}"],
        )
        for n in range(starts + 1):
            for side in sides:
                port = free_port()
                argv, path, headers = command(side, port)
                name = f"first-{n}-{side.split()[0]}"
                started = time.perf_counter()
                stack.spawn(name, argv, env=env)
                process = dict(stack.processes)[name]
                try:
                    wait_for_port(port, process)
                    arrived = first_token(port, path, body, headers)
                finally:
                    stack.stop([name])
                if n:  # the first start warms the emulators and writes the bytecode
                    times[side].append(arrived - started)
    finally:
        stack.stop()
        shutil.rmtree(cache, ignore_errors=True)
    median = {side: statistics.median(values) for side, values in times.items()}
    print(f"(c) process start to the first token of its first request, median of {starts}:")
    for side, value in median.items():
        label = side if side == OURS else PEERS[side]
        print(
            f"    {label:20s} {value:5.2f} s"
            + ("" if side == OURS else f" | ours/peer {median[OURS] / value:4.2f}x")
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--only", choices=["a", "b", "c"], action="append")
    args = parser.parse_args()
    only = set(args.only or "abc")
    if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        raise SystemExit("run through `make bench` (it starts the emulators)")
    env = {
        **os.environ,
        "OPENAI_API_KEY": "bench",
        "SPARK_TASKS_URL": "http://127.0.0.1:9/",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'functions'}",
    }
    print(f"cold_start: {os.cpu_count()} cores, {sys.version.split()[0]}")
    if "a" in only:
        imports(args.runs, env)
    if "b" in only:
        first_requests(args.starts)
    if "c" in only:
        to_first_token(args.starts)


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("cold_start"):
        main()
