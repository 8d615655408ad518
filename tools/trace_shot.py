"""The docs' picture of one run's trace in the local trace viewer
(``docs/img/observability-trace.png``), made again from a real run::

    make trace-shot

(``.venv/bin/python -m tools.stack run -- .venv/bin/python -m tools.trace_shot``: the
emulators first.) It starts Arize Phoenix as ``make dev`` does (``start_trace_viewer``,
with a data directory of its own, so the viewer holds this one run), a scripted OpenAI
fake in this process (``tests/fakes/openai_server.py``) and one ``api`` and one ``tasks``
function tracing to the viewer, as ``make dev`` has them do. A teacher asks for a
lesson: the run streams its reply and calls ``create_lesson``, a task tool; the task is
delivered to the tasks function, which drafts the lesson with a model call, and the
agent follows up. Once the viewer holds that whole trace (the request, the run, its
model call, the task's enqueue, its delivery with the tool and its model call, and the
follow-up's), Chromium (Playwright, as the browser tests drive it) opens the trace and
the picture is saved. Nothing leaves loopback.

It needs the viewer (``.tools/phoenix``: ``make dev`` installs it, or
``make .tools/phoenix/.installed``) and Chromium (``SPARK_CHROMIUM``, by default
Debian's, which ``make setup`` installs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.fakes.openai_server import FakeOpenAI, Script, ServerThread
from tools.stack import (
    ROOT,
    TRACE_VIEWER,
    Stack,
    free_port,
    sign_up,
    start_functions,
    start_trace_viewer,
)

T = TypeVar("T")

PICTURE = ROOT / "docs" / "img" / "observability-trace.png"
CHROMIUM = os.environ.get("SPARK_CHROMIUM", "/usr/bin/chromium")
SEND = "/api/spark/agent/messages"
ASK = "Please make a lesson on glaciers for my Year 4 class"
LESSON = '{"topic": "glaciers", "audience": "Year 4"}'
# What create_lesson asks the model for (its brief: shared/tools/lessons).
BRIEF = "Write the lesson.\n\nTopic: glaciers\nLearners: Year 4\nDuration: 45 minutes"
# The spans the picture must show, each by the start of its name.
WANTED = (
    f"POST {SEND}",
    "invoke_agent",
    "chat ",
    "send ",
    "process tool task",
    "execute_tool create_lesson",
    "text_completion ",
)


def wait_for(found: Callable[[], T | None], what: str, timeout: float = 90) -> T:
    """``found()`` once it is something, polled until ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.5)
    sys.exit(f"trace-shot: gave up waiting for {what} after {timeout:.0f} s")


def scripted(fake: FakeOpenAI) -> None:
    """The model's part: a reply that asks for the lesson, the lesson drafted, and the
    agent's follow-up once it is ready."""
    fake.script(
        ASK,
        Script(
            chunks=["What", " a", " good", " idea:", " I", " am", " drafting", " it", " now."],
            delay=0.08,  # long enough for a streaming write or two, as a real reply
            tool_calls=[("create_lesson", LESSON)],
            then=Script(chunks=["Your", " glaciers", " lesson", " is", " ready."], delay=0.05),
        ),
    )
    drafted = ["<lesson><h1>Glaciers</h1>", "<p>How ice", " shapes", " valleys.</p></lesson>"]
    fake.script(BRIEF, Script(chunks=drafted, delay=0.1))


def converse(api: str, token: str) -> None:
    """Send the teacher's message and read its stream to the end."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    with httpx.stream("POST", api + SEND, headers=headers, json={"text": ASK}, timeout=60) as r:
        if r.status_code != 200:
            sys.exit(f"trace-shot: the api answered {r.status_code}: {r.read()!r}")
        for _ in r.iter_bytes():
            pass


def spans(viewer: str) -> list[dict[str, Any]]:
    """Every span the viewer holds (its REST API, project ``default``)."""
    url = f"{viewer}/v1/projects/default/spans?limit=1000"
    with urllib.request.urlopen(url, timeout=10) as response:
        return list(json.load(response)["data"])


def whole_trace(viewer: str) -> str | None:
    """The id of the run's trace once the viewer holds every span ``WANTED`` in it,
    the follow-up's run and model call too."""
    held = spans(viewer)
    for root in held:
        if root["name"] != f"POST {SEND}":
            continue
        trace = root["context"]["trace_id"]
        names = [s["name"] for s in held if s["context"]["trace_id"] == trace]
        every = all(any(n.startswith(w) for n in names) for w in WANTED)
        runs = sum(n.startswith("invoke_agent") for n in names)
        chats = sum(n.startswith("chat ") for n in names)
        if every and runs >= 2 and chats >= 2:
            return str(trace)
    return None


def photograph(viewer: str, trace: str, picture: Path) -> None:
    """Open ``trace`` in the viewer and save what Chromium shows in ``picture``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: this may run as root (a container), where Chromium's own
        # sandbox cannot start (as tests/e2e/test_web.py).
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 980}, locale="en-GB")
            page.goto(f"{viewer}/redirects/traces/{trace}")
            page.get_by_text("execute_tool create_lesson").first.wait_for(timeout=60_000)
            page.get_by_text("chat fake-model").last.click()
            page.wait_for_timeout(1000)  # the chosen span's details drawn
            picture.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(picture))
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=PICTURE, help="where the picture goes")
    args = parser.parse_args()
    if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        sys.exit("trace-shot: run through `make trace-shot` (it starts the emulators)")
    if not TRACE_VIEWER.exists():
        sys.exit("trace-shot: no viewer: `make .tools/phoenix/.installed` installs it")
    logs = Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="trace-shot-"))
    stack = Stack(logs / "trace-shot")
    stack.log_dir.mkdir(parents=True, exist_ok=True)
    fake = FakeOpenAI()
    scripted(fake)
    with tempfile.TemporaryDirectory(prefix="trace-shot-") as data, ServerThread(fake.app) as model:
        try:
            port = free_port()
            traced = start_trace_viewer(stack, port, Path(data))
            env = {
                **traced,
                "SPARK_MODEL": "openai:fake-model",
                "OPENAI_API_KEY": "local-fake",
                "OPENAI_BASE_URL": f"http://127.0.0.1:{model.port}/v1",
                "SPARK_THROTTLE_MS": "200",
                "OTEL_BSP_SCHEDULE_DELAY": "200",  # each batch leaves at once, not in 5 s
            }
            api, _ = start_functions(stack, free_port(), free_port(), env, instances=1)
            auth = os.environ["FIREBASE_AUTH_EMULATOR_HOST"]
            account = sign_up(auth, "teacher@example.com", "spark-local")
            converse(api, account.token)
            viewer = f"http://127.0.0.1:{port}"
            trace = wait_for(lambda: whole_trace(viewer), "the whole trace in the viewer")
            photograph(viewer, trace, args.out)
            print(f"trace-shot: trace {trace} saved as {args.out.relative_to(ROOT)}")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
