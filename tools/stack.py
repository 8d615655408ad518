"""Start and stop the local stack: Firestore, Auth, Cloud Storage and Cloud Tasks
emulators, and the
``api`` and ``tasks`` functions.

    python -m tools.stack dev            # ports from firebase.json, then waits for Ctrl-C
    SPARK_DEV_FAKE=1 SPARK_MODEL=anthropic:fake-model python -m tools.stack dev
                                         # ...with the chosen provider's local fake
    python -m tools.stack run -- CMD...  # free ports, runs CMD with the stack's env, stops
    python -m tools.stack token          # a fresh ID token for make dev's test user
    python -m tools.stack reset          # forget the data make dev keeps (make dev-reset)

Everything started here runs in its own process group and is killed with it (the
Firestore launcher's java child included), whatever way the command ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from tools.keep import Keep

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "demo-spark"
STATE_DIR = ROOT / ".stack"
# The rules the emulator enforces, so the tests' rules are the ones Terraform releases.
FIRESTORE_RULES = ROOT / "firestore.rules"
TASKS_LOCATION = "europe-west2"
TASKS_QUEUE = "spark-tasks"
TASKS_EMULATOR = ROOT / ".tools" / "tasks-emulator" / "bin" / "python"
# The emulator retries a failed delivery every 0.1 s; our handler retries tools itself
# (with backoff), so the emulator's retries only cover a handler that did not answer.
TASKS_EMULATOR_RETRIES = 10
DEV_TASKS_EMULATOR_PORT = 8123
DEV_TASKS_PORT = 8081
# The web client's port: SPARK_APP_URL's default origin, so invite links reach it.
DEV_WEB_PORT = 5173
DEV_STORAGE_PORT = 9199
STORAGE_EMULATOR = ROOT / ".venv" / "bin" / "gcp-storage-emulator"
# make dev's trace viewer (Arize Phoenix), in its own virtualenv: docs/observability.md.
TRACE_VIEWER = ROOT / ".tools" / "phoenix" / "bin" / "phoenix"
DEV_TRACES_PORT = 6006
# Each provider's fake (tests/fakes/), its SDK's variables, and the base URL it serves.
FAKES = {
    "openai": ("tests.fakes.openai_server", "OPENAI", "/v1"),
    "anthropic": ("tests.fakes.anthropic_server", "ANTHROPIC", ""),
    "google": ("tests.fakes.gemini_server", "GEMINI", ""),
}


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of ``pid`` and its direct children (a server's worker),
    as the benchmarks measure a function's process."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def peak_rss_mb(pid: int) -> float:
    """The highest resident memory (``VmHWM``) so far of ``pid`` or one of its direct
    children (a server's worker, which serves the requests), in MB."""
    peak = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = stat.read_text().rsplit(")", 1)[1].split()[1]
            if stat.parent.name != str(pid) and parent != str(pid):
                continue
            status = (stat.parent / "status").read_text()
        except OSError:
            continue
        peak = max(
            peak,
            next((int(n.split()[1]) for n in status.splitlines() if n.startswith("VmHWM:")), 0),
        )
    return peak / 1024


# Ports for the stack's listeners are drawn below the kernel's ephemeral range (Linux's
# default starts at 32768), never from it: a port the kernel handed to ``bind(0)`` and
# that was let go is the kind it next gives an outgoing connection, which took one
# before the emulator meant for it could listen (seen under load: the storage
# emulator's readiness check answered by another server). Each is handed out once.
_PORTS = range(20_000, 32_768)
_HANDED: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, not handed out before by this process."""
    for _ in range(500):
        port = random.choice(_PORTS)
        if port in _HANDED:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED.add(port)
        return port
    raise RuntimeError(f"no free port in {_PORTS.start}-{_PORTS.stop - 1} after 500 tries")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(200 <= response.status < 500)
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except OSError:
        return False


def firestore_launcher() -> list[str]:
    """The Cloud CLI's own Firestore emulator launcher (no download needed)."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        sys.exit("The Google Cloud CLI (gcloud) is needed for the Firestore emulator.")
    root = subprocess.run(
        [gcloud, "info", "--format=value(installation.sdk_root)"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    launcher = Path(root) / "platform" / "cloud-firestore-emulator" / "cloud_firestore_emulator"
    if launcher.exists():
        return [str(launcher), "start"]
    return [gcloud, "emulators", "firestore", "start"]


_LOGS_BEGUN: set[Path] = set()
"""The log files this process has begun (``Stack.spawn``)."""


@dataclass
class Stack:
    """The processes of one local stack and the environment that reaches them."""

    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
    ) -> None:
        path = self.log_dir / f"{name}.log"
        # A process started again (or another stack's of the same name, in the same
        # folder) adds to the log this process began, so what failed before stays in it.
        log = path.open("ab" if path in _LOGS_BEGUN else "wb")
        _LOGS_BEGUN.add(path)
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.processes.append((name, process))

    def wait_ready(self, name: str, url: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        process = dict(self.processes)[name]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.fail(name, f"exited with status {process.returncode}")
            if _http_ok(url):
                return
            time.sleep(0.2)
        self.fail(name, f"not ready at {url} after {timeout:.0f} s")

    def wait_listening(self, name: str, port: int, timeout: float = 30) -> None:
        """Wait until ``name`` accepts connections on ``port`` (no HTTP to ask)."""
        deadline = time.monotonic() + timeout
        process = dict(self.processes)[name]
        while not tcp_ok("127.0.0.1", port):
            if process.poll() is not None or time.monotonic() > deadline:
                self.fail(name, "did not start")
            time.sleep(0.1)

    def fail(self, name: str, why: str) -> None:
        log = (self.log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
        self.stop()
        sys.exit(f"{name} {why}. Its log ends:\n{log}")

    def stop(self, names: Collection[str] | None = None) -> None:
        """Stop every process (or those ``names``), newest first, with their groups."""
        chosen = [(n, p) for n, p in self.processes if names is None or n in names]
        for _, process in reversed(chosen):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for _, process in reversed(chosen):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            # The group may outlive its leader (java under the launcher script).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        self.processes = [(n, p) for n, p in self.processes if (n, p) not in chosen]


def start_emulators(
    stack: Stack, firestore_port: int, auth_port: int, hub_port: int, keep: Keep | None = None
) -> None:
    """Firestore's and Auth's emulators; with ``keep``, from the data it kept."""
    firestore = f"127.0.0.1:{firestore_port}"
    auth = f"127.0.0.1:{auth_port}"
    stack.spawn(
        "firestore",
        [
            *firestore_launcher(),
            "--host=127.0.0.1",
            f"--port={firestore_port}",
            f"--rules={FIRESTORE_RULES}",
            *(keep.firestore_flags() if keep else []),
        ],
    )
    config = {
        "emulators": {
            "auth": {"host": "127.0.0.1", "port": auth_port},
            "hub": {"host": "127.0.0.1", "port": hub_port},
            "logging": {"host": "127.0.0.1", "port": free_port()},
            "ui": {"enabled": False},
            "singleProjectMode": True,
        }
    }
    config_path = stack.log_dir / "firebase.json"
    config_path.write_text(json.dumps(config))
    firebase = ROOT / "node_modules" / ".bin" / "firebase"
    if not firebase.exists():
        stack.stop()
        sys.exit("firebase-tools is not installed; run `make setup` (npm ci) first.")
    stack.spawn(
        "auth",
        [
            str(firebase),
            "emulators:start",
            "--only",
            "auth",
            "--project",
            PROJECT,
            "--config",
            str(config_path),
            *(keep.auth_flags() if keep else []),
        ],
        env={"NO_UPDATE_NOTIFIER": "1", "FIREBASE_CLI_DISABLE_UPDATE_CHECK": "1"},
    )
    stack.wait_ready("firestore", f"http://{firestore}/")
    stack.wait_ready("auth", f"http://{auth}/")
    stack.env.update(
        {
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "FIRESTORE_EMULATOR_HOST": firestore,
            "FIREBASE_AUTH_EMULATOR_HOST": auth,
        }
    )


def tcp_ok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def start_storage_emulator(stack: Stack, port: int, keep: Keep | None = None) -> None:
    """A Cloud Storage emulator (``gcp-storage-emulator``, from uv.lock) speaking the GCS
    JSON API on loopback, with the project's default bucket: in memory, or with
    ``keep`` in files that outlive it.

    Not firebase-tools' Storage emulator: that one needs a rules runtime (a Java jar)
    that it downloads on first start from outside the package registries, so it cannot
    start on a fresh machine offline (see docs/concepts/attachments.md).
    """
    if not STORAGE_EMULATOR.exists():
        stack.stop()
        sys.exit("The Cloud Storage emulator is not installed; run `make setup` first.")
    stack.spawn(
        "storage",
        [
            str(STORAGE_EMULATOR),
            "start",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--default-bucket={PROJECT}.appspot.com",
            *([] if keep else ["--in-memory"]),
        ],
        env=keep.storage_env() if keep else None,
    )
    stack.wait_ready("storage", f"http://127.0.0.1:{port}/storage/v1/b", timeout=30)
    stack.env["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"


def start_tasks_emulator(stack: Stack, port: int) -> None:
    """gcloud-tasks-emulator on loopback with our queue; its own virtualenv."""
    if not TASKS_EMULATOR.exists():
        stack.stop()
        sys.exit("The Cloud Tasks emulator is not installed; run `make setup` first.")
    queue = f"projects/{PROJECT}/locations/{TASKS_LOCATION}/queues/{TASKS_QUEUE}"
    stack.spawn(
        "tasks-emulator",
        [
            str(TASKS_EMULATOR),
            str(ROOT / "tools" / "tasks_emulator" / "launch.py"),
            "start",
            f"--port={port}",
            f"--default-queue={queue}",
            f"--max-retries={TASKS_EMULATOR_RETRIES}",
        ],
    )
    stack.wait_listening("tasks-emulator", port)
    stack.env.update(
        {
            "CLOUD_TASKS_EMULATOR_HOST": f"127.0.0.1:{port}",
            "CLOUD_TASKS_LOCATION": TASKS_LOCATION,
            "CLOUD_TASKS_QUEUE": TASKS_QUEUE,
            "SPARK_TASKS_LOCAL_KEY": secrets.token_hex(16),
        }
    )


def start_trace_viewer(stack: Stack, port: int, data_dir: Path) -> dict[str, str]:
    """Arize Phoenix on loopback, receiving OTLP/HTTP and showing the traces on ``port``,
    its data kept in ``data_dir``; returns the environment that makes the functions
    send it their spans (``{}`` when it is not installed: tracing stays off)."""
    if not TRACE_VIEWER.exists():
        return {}
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),  # not 4317: anything may hold that
        "PHOENIX_WORKING_DIR": str(data_dir),
        "PHOENIX_TELEMETRY_ENABLED": "false",  # no usage reports: nothing leaves loopback
    }
    stack.spawn("traces", [str(TRACE_VIEWER), "serve"], env=env)
    stack.wait_ready("traces", f"http://127.0.0.1:{port}/healthz", timeout=180)
    return {"SPARK_TELEMETRY": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}


def start_function(
    stack: Stack,
    target: str,
    port: int,
    env: dict[str, str],
    deployed: tuple[Path, Path] | None = None,
) -> str:
    """Start one function (``api`` or ``tasks``) with exactly ``env`` added to ours;
    returns its base URL once it answers.

    ``deployed`` is ``(folder, virtualenv)``: run the function as Cloud Functions does
    from an unpacked source archive (``main.py`` in the working directory, ASGI detected
    from its decorators) with that virtualenv's functions-framework, instead of this
    checkout's."""
    return _start_function(
        stack, target, port, {**stack.env, "PYTHONUNBUFFERED": "1", **env}, deployed
    )


def _start_function(
    stack: Stack,
    target: str,
    port: int,
    env: dict[str, str],
    deployed: tuple[Path, Path] | None = None,
    name: str = "",
) -> str:
    if deployed is None:
        framework = ROOT / ".venv" / "bin" / "functions-framework"
        options = [f"--source={ROOT / 'functions' / 'main.py'}", "--asgi"]
        cwd = ROOT
    else:
        cwd, venv = deployed
        framework, options = venv / "bin" / "functions-framework", []
    stack.spawn(
        name or target,
        [str(framework), f"--target={target}", *options, "--host=127.0.0.1", f"--port={port}"],
        env=env,
        cwd=cwd,
    )
    url = f"http://127.0.0.1:{port}"
    stack.wait_ready(name or target, f"{url}/healthz", timeout=60)
    return url


def start_functions(
    stack: Stack,
    api_port: int,
    tasks_port: int,
    env: dict[str, str] | None = None,
    instances: int = 2,
) -> tuple[str, str]:
    """Start the ``api`` and ``tasks`` functions as Cloud Functions would
    (functions-framework, ASGI); ``env`` is added to the stack's. Returns their base
    URLs once they answer.

    With ``instances`` above one, each function runs as that many processes on free
    ports behind a round-robin proxy (``tools/proxy.py``) on its port, as production
    runs many instances: consecutive requests, a task's deliveries and its watchdog
    meet different processes, with different memories."""
    tasks_url = f"http://127.0.0.1:{tasks_port}/"
    full = {**stack.env, "PYTHONUNBUFFERED": "1", "SPARK_TASKS_URL": tasks_url, **(env or {})}
    if instances <= 1:
        api = _start_function(stack, "api", api_port, full)
        return api, _start_function(stack, "tasks", tasks_port, full)
    urls = []
    for target, port in (("api", api_port), ("tasks", tasks_port)):
        backends = [free_port() for _ in range(instances)]
        for n, backend in enumerate(backends, 1):
            _start_function(stack, target, backend, full, name=f"{target}-{n}")
        proxy = [sys.executable, "-m", "tools.proxy", f"--port={port}"]
        # Named apart from its processes' logs (api-1, api-2): it logs nothing itself.
        stack.spawn(f"{target}-proxy", proxy + [f"--backend=127.0.0.1:{b}" for b in backends])
        urls.append(f"http://127.0.0.1:{port}")
        stack.wait_ready(f"{target}-proxy", f"{urls[-1]}/healthz", timeout=30)
    return urls[0], urls[1]


class Account(NamedTuple):
    uid: str
    token: str


def sign_up(auth_host: str, email: str, password: str) -> Account:
    """A user in the Auth emulator (signed in if it exists) and an ID token for it."""
    base = f"http://{auth_host}/identitytoolkit.googleapis.com/v1"
    body = {"email": email, "password": password, "returnSecureToken": True}
    for action in ("accounts:signInWithPassword", "accounts:signUp"):
        request = urllib.request.Request(
            f"{base}/{action}?key=local",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = json.load(response)
                return Account(uid=str(body["localId"]), token=str(body["idToken"]))
        except urllib.error.HTTPError:
            continue
    raise RuntimeError(f"could not sign in or sign up {email} on the Auth emulator")


@contextlib.contextmanager
def running(log_dir: Path, ports: dict[str, int], keep: Keep | None = None) -> Iterator[Stack]:
    stack = Stack(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        start_emulators(stack, ports["firestore"], ports["auth"], ports["hub"], keep)
        start_storage_emulator(stack, ports["storage"], keep)
        start_tasks_emulator(stack, ports["tasks_emulator"])
        yield stack
    finally:
        stack.stop()
        signal.signal(signal.SIGTERM, previous)


def firebase_ports() -> dict[str, int]:
    emulators = json.loads((ROOT / "firebase.json").read_text())["emulators"]
    ports = {name: int(emulators[name]["port"]) for name in ("firestore", "auth", "hub")}
    return {**ports, "tasks_emulator": DEV_TASKS_EMULATOR_PORT, "storage": DEV_STORAGE_PORT}


def run(command: list[str]) -> int:
    if not command:
        sys.exit("usage: python -m tools.stack run -- COMMAND...")
    names = ("firestore", "auth", "hub", "tasks_emulator", "storage")
    ports = {name: free_port() for name in names}
    log_dir = Path(tempfile.mkdtemp(prefix="spark-stack-"))
    with running(log_dir, ports) as stack:
        env = {**os.environ, **stack.env, "SPARK_STACK_LOGS": str(log_dir)}
        return subprocess.run(command, env=env, check=False).returncode


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("mode", choices=["dev", "run", "token", "reset"])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.mode == "run":
        sys.exit(run(command))
    from tools import dev  # make dev's own parts: for a person, not for tests

    sys.exit({"dev": dev.dev, "token": dev.token, "reset": dev.reset}[args.mode]())


if __name__ == "__main__":
    main()
