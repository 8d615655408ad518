"""``make dev``: the local stack for a person, with the ports of ``firebase.json``.

Before it prints anything or touches ``.stack/dev/`` it checks that it can start (every
port free, ``SPARK_MODEL`` valid), since a second ``make dev`` used to print its whole
banner, empty the first one's logs, and die. The data of Firestore, Auth and Storage is
kept between runs under ``.stack/data/`` (``tools/keep.py``); ``reset`` forgets it.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Mapping

from tools.keep import Keep
from tools.stack import (
    DEV_TASKS_PORT,
    DEV_TRACES_PORT,
    DEV_WEB_PORT,
    FAKES,
    PROJECT,
    STATE_DIR,
    TASKS_QUEUE,
    Stack,
    firebase_ports,
    free_port,
    running,
    sign_up,
    start_functions,
    start_trace_viewer,
)

# What make dev keeps between runs (tools/keep.py); `make dev-reset` removes it.
DATA_DIR = STATE_DIR / "data"


def start_fake(stack: Stack, spark_model: str) -> tuple[dict[str, str], str]:
    """Start the local fake of the provider ``spark_model`` chooses; returns the
    environment that points the functions at it, and what to call it."""
    from shared.config.providers import parse_model

    provider, model = parse_model(spark_model)
    module, prefix, path = FAKES[provider]
    port = free_port()
    stack.spawn("fake-model", [sys.executable, "-m", module, f"--port={port}"])
    stack.wait_listening("fake-model", port)
    env = {
        "SPARK_MODEL": f"{provider}:{model}",
        f"{prefix}_API_KEY": "local-fake",
        f"{prefix}_BASE_URL": f"http://127.0.0.1:{port}{path}",
    }
    return env, f"the local {provider} fake ({module}, port {port})"


def describe_model() -> str:
    """Where replies come from when no fake is started."""
    from shared.config import KEY_VARIABLE, Settings

    settings = Settings.from_env()
    if settings.offline_model:
        return f"the offline model (no {KEY_VARIABLE[settings.provider]} set)"
    return f"{settings.provider}:{settings.model}"


PORT_NAMES = {
    "firestore": "the Firestore emulator",
    "auth": "the Auth emulator",
    "hub": "the Firebase emulator hub",
    "storage": "the Cloud Storage emulator",
    "tasks_emulator": "the Cloud Tasks emulator",
    "api": "the api function; PORT moves it",
    "tasks": "the tasks function",
    "web": "the web client",
    "traces": "the trace viewer",
}


def dev_ports() -> dict[str, int]:
    """The ports ``make dev`` serves on: firebase.json's, ours and ``PORT``'s."""
    api = int(os.environ.get("PORT", "8080"))
    return {
        **firebase_ports(),
        "api": api,
        "tasks": DEV_TASKS_PORT,
        "web": DEV_WEB_PORT,
        "traces": DEV_TRACES_PORT,
    }


def taken(ports: Mapping[str, int]) -> dict[str, int]:
    """Those of ``ports`` that something on this machine already holds (on loopback)."""
    busy = {}
    for name, port in ports.items():
        with socket.socket() as sock:
            # A port left in TIME_WAIT is free to listen on; only a holder counts.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                busy[name] = port
    return busy


def refusal(ports: Mapping[str, int]) -> str | None:
    """Why ``make dev`` cannot start (``None``: it can), said before it prints or
    touches anything: a port taken (another ``make dev``, most likely, whose logs a
    second one would empty), or a ``SPARK_MODEL`` that names no provider."""
    from shared.config import Settings
    from shared.errors import ConfigurationError
    from shared.prose import listed

    try:
        Settings.from_env()
    except ConfigurationError as exc:
        return f"make dev cannot start: {exc.message}"
    busy = taken(ports)
    if not busy:
        return None
    held = [f"{port} ({PORT_NAMES.get(name, name)})" for name, port in busy.items()]
    which = listed(held)
    return (
        f"make dev cannot start: port{'s' if len(held) > 1 else ''} {which} "
        f"{'are' if len(held) > 1 else 'is'} already in use on 127.0.0.1. Another "
        "`make dev` may be running: stop it with Ctrl-C in its terminal (`lsof -i "
        f":{next(iter(busy.values()))}` shows what holds the port). Nothing was started."
    )


def banner(
    stack: Stack, api_port: int, model: str, keep: Keep, token: str, traced: bool = False
) -> str:
    env = stack.env
    traces = (
        f"http://127.0.0.1:{DEV_TRACES_PORT}/   each request's spans (Arize Phoenix)"
        if traced
        else "off (the viewer is installed by `make dev`: .tools/phoenix)"
    )
    return f"""
Spark AI Agent local stack is running (logs in {stack.log_dir}):
  web        http://127.0.0.1:{DEV_WEB_PORT}/   the web client: sign in as teacher@example.com,
             password spark-local (or any e-mail and password)
  api        http://127.0.0.1:{api_port}   replies from {model}
  tasks      http://127.0.0.1:{DEV_TASKS_PORT}   (called by the Cloud Tasks emulator only)
             (two processes of each behind a round-robin proxy, as production runs
             several instances; their logs are api-1, api-2, tasks-1, tasks-2)
  Firestore  {env["FIRESTORE_EMULATOR_HOST"]}   (emulator, rules from firestore.rules)
  Auth       {env["FIREBASE_AUTH_EMULATOR_HOST"]}   (emulator; test user teacher@example.com)
  Storage    {env["STORAGE_EMULATOR_HOST"]}   (Cloud Storage emulator, {PROJECT}.appspot.com)
  Tasks      {env["CLOUD_TASKS_EMULATOR_HOST"]}   (Cloud Tasks emulator, queue {TASKS_QUEUE})
  traces     {traces}

Firestore, Auth and Storage data are kept in {keep.root} when you stop
(Ctrl-C) and are there again next time; `make dev-reset` starts clean.

A fresh ID token for the test user (valid for an hour):
  .venv/bin/python -m tools.stack token

Try it:
  TOKEN=$(.venv/bin/python -m tools.stack token)
  curl -N -H "Accept: text/event-stream" -H "Authorization: Bearer $TOKEN" \\
    -d '{{"text":"hello"}}' http://127.0.0.1:{api_port}/api/spark/agent/messages

Without "Accept: text/event-stream" the api answers 202 at once and a Cloud Task
(through the emulator and the tasks function) writes the reply into Firestore.

This token works now:
  {token}

Press Ctrl-C to stop everything."""


def dev() -> int:
    # A shell may start us with SIGINT ignored (e.g. `make dev &`); Ctrl-C must still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ports = dev_ports()
    refused = refusal(ports)
    if refused:
        print(refused, file=sys.stderr)
        return 1
    keep = Keep(DATA_DIR, PROJECT)
    with running(STATE_DIR / "dev", ports, keep) as stack:
        try:
            return serve(stack, ports, keep)
        finally:
            save(stack, ports, keep)


def start_web(stack: Stack, port: int, api_port: int) -> None:
    """The web client (``tools/web.py``), freshly built, against the api on ``api_port``."""
    from tools.web import build

    build()
    api = f"--api=http://127.0.0.1:{api_port}"
    stack.spawn("web", [sys.executable, "-m", "tools.web", "serve", f"--port={port}", api])
    stack.wait_ready("web", f"http://127.0.0.1:{port}/config.json", timeout=30)


def serve(stack: Stack, ports: Mapping[str, int], keep: Keep) -> int:
    """Start the functions, say so, and wait for Ctrl-C or a process's death."""
    fake_env: dict[str, str] = {}
    model = describe_model()
    if os.environ.get("SPARK_DEV_FAKE", "").strip() in ("1", "true", "yes"):
        spark_model = os.environ.get("SPARK_MODEL") or "openai:fake-model"
        fake_env, model = start_fake(stack, spark_model)
    traces_env = start_trace_viewer(stack, ports["traces"], DATA_DIR / "traces")
    start_functions(stack, ports["api"], ports["tasks"], {**fake_env, **traces_env})
    start_web(stack, ports["web"], ports["api"])
    auth = stack.env["FIREBASE_AUTH_EMULATOR_HOST"]
    token = sign_up(auth, "teacher@example.com", "spark-local").token
    print(banner(stack, ports["api"], model, keep, token, bool(traces_env)), flush=True)
    try:
        while all(p.poll() is None for _, p in stack.processes):
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nStopping…", flush=True)
        return 0
    dead = [name for name, p in stack.processes if p.poll() is not None]
    print(f"{', '.join(dead)} stopped unexpectedly; see the logs in {stack.log_dir}")
    return 1


def save(stack: Stack, ports: Mapping[str, int], keep: Keep) -> None:
    """Keep the emulators' data for the next run: the functions stop first, so that
    nothing writes while it is exported."""
    emulators = ("firestore", "auth", "storage", "tasks-emulator", "traces")
    stack.stop([name for name, _ in stack.processes if name not in emulators])
    alive = dict(stack.processes)
    if any(
        alive.get(name) is None or alive[name].poll() is not None for name in ("firestore", "auth")
    ):
        print(f"Not saving the local data: an emulator had stopped ({keep.root} keeps the last).")
        return
    failed = keep.save(f"127.0.0.1:{ports['firestore']}", f"127.0.0.1:{ports['hub']}")
    if failed:
        print(f"Could not save {', '.join(failed)}; {keep.root} keeps the last saved.")
    else:
        print(f"Local data saved in {keep.root} (`make dev-reset` forgets it).", flush=True)


NOT_RUNNING = "The local stack is not running; start it with `make dev`."


def token() -> int:
    auth = f"127.0.0.1:{firebase_ports()['auth']}"
    try:
        account = sign_up(auth, "teacher@example.com", "spark-local")
    except (OSError, RuntimeError):  # nothing listens, or it is not the Auth emulator
        print(f"{NOT_RUNNING} (Nothing answered as the Auth emulator on {auth}.)", file=sys.stderr)
        return 1
    print(account.token)
    return 0


def reset() -> int:
    """Forget the data ``make dev`` keeps; refused while a stack is running."""
    busy = taken(dev_ports())
    if busy:
        port = next(iter(busy.values()))
        print(
            f"Port {port} is in use: a `make dev` may be running. Stop it (Ctrl-C) first, "
            "then reset: it saves its data as it stops.",
            file=sys.stderr,
        )
        return 1
    forgotten = Keep(DATA_DIR, PROJECT).reset()
    print(f"Removed {DATA_DIR}." if forgotten else f"Nothing to remove ({DATA_DIR} is not there).")
    return 0
