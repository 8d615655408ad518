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
WARM_UP = "Hello"
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


def converse(api: str, token: str, text: str) -> None:
    """Send the teacher's message ``text`` in a new conversation and read its stream to
    the end."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    with httpx.stream("POST", api + SEND, headers=headers, json={"text": text}, timeout=60) as r:
        if r.status_code != 200:
            sys.exit(f"trace-shot: the api answered {r.status_code}: {r.read()!r}")
        for _ in r.iter_bytes():
            pass


def spans(viewer: str) -> list[dict[str, Any]]:
    """Every span the viewer holds (its REST API, project ``default``)."""
    url = f"{viewer}/v1/projects/default/spans?limit=1000"
    with urllib.request.urlopen(url, timeout=10) as response:
        return list(json.load(response)["data"])


def whole_trace(viewer: str) -> tuple[str, str] | None:
    """The id of the run's trace once the viewer holds every span ``WANTED`` in it,
    the follow-up's run and model call too, and the id of its task tool's model call."""
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
            drafting = next(
                s
                for s in held
                if s["context"]["trace_id"] == trace and s["name"].startswith("text_completion")
            )
            return str(trace), str(drafting["context"]["span_id"])
    return None


def _drag(page: Any, handle: Any, dx: float) -> None:
    """Move a resize ``handle`` of the viewer's panels ``dx`` pixels to the right."""
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx, y, steps=15)
    page.mouse.up()


def photograph(viewer: str, trace: str, chosen: str, picture: Path) -> None:
    """Open ``trace`` in the viewer, its span ``chosen`` selected with its attributes
    shown, and save what Chromium shows in ``picture``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: this may run as root (a container), where Chromium's own
        # sandbox cannot start (as tests/e2e/test_web.py).
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            # Tall enough for the whole tree: every span of the run, none scrolled away.
            page = browser.new_page(viewport={"width": 1600, "height": 1900}, locale="en-GB")
            page.goto(f"{viewer}/redirects/spans/{chosen}")
            page.get_by_text("execute_tool create_lesson").first.wait_for(timeout=60_000)
            page.wait_for_timeout(1000)  # the panels laid out
            # The trace's panel wider (its left edge, the only thick vertical handle),
            # then its tree wider (the tall thin handle beside it), so names show whole.
            handles = page.locator("[role=separator][aria-orientation=vertical]")
            boxes = [(h, h.bounding_box()) for h in handles.all()]
            _drag(page, next(h for h, b in boxes if b and b["width"] >= 3), -90)
            page.wait_for_timeout(500)
            boxes = [(h, h.bounding_box()) for h in handles.all()]
            tree = next(h for h, b in boxes if b and b["width"] < 3 and b["height"] > 1000)
            _drag(page, tree, 300)
            page.get_by_role("tab", name="Attributes").click()
            page.wait_for_timeout(1000)  # the attributes drawn
            picture.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(picture))
        finally:
            browser.close()
    print(f"trace-shot: trace {trace} saved as {picture}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=PICTURE, help="where the picture goes")
    parser.add_argument(
        "--data", type=Path, help="keep the viewer's data here (default: a temporary folder)"
    )
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
    with (
        tempfile.TemporaryDirectory(prefix="trace-shot-") as scratch,
        ServerThread(fake.app) as model,
    ):
        data = args.data or Path(scratch)
        try:
            port = free_port()
            traced = start_trace_viewer(stack, port, data)
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
            # A first message warms the emulators and the functions up (their first
            # writes and connections are slow), so the picture shows a usual run's times.
            converse(api, account.token, WARM_UP)
            converse(api, account.token, ASK)
            viewer = f"http://127.0.0.1:{port}"
            found = wait_for(lambda: whole_trace(viewer), "the whole trace in the viewer")
            photograph(viewer, *found, args.out)
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
