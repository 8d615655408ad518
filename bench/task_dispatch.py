"""Overhead from the model's tool call to the task handler starting the tool, measured
side by side with the Cloud Tasks emulator's own dispatch.

Run with ``make bench`` (it starts the emulators). Prints, over N samples each:

(a) emulator dispatch: ``create_task`` called → a bare loopback HTTP server receives
    the task (the emulator polls its queues every 0.1 s, so this is ~0-100 ms);
(b) tool call → tool start on the whole stack: the fake model sends the finish of a
    ``create_lesson`` tool call → the ``tasks`` function, called by the emulator,
    starts the tool (observed as the tool's drafting request reaching the fake model).

The overhead beyond the emulator's dispatch is (b) - (a), at p50 and p90. Both ends
of (b) are timestamped in this process (the fake model runs here), on one clock.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

import httpx  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from shared.queue.base import QueuedTask  # noqa: E402
from shared.queue.cloudtasks import CloudTasksQueue  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Script, ServerThread  # noqa: E402
from tools.stack import (  # noqa: E402
    PROJECT,
    TASKS_LOCATION,
    TASKS_QUEUE,
    Stack,
    free_port,
    sign_up,
    start_functions,
)


class TimedFake(FakeOpenAI):
    """The fake model, noting when each stream ended and each request arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: dict[str, float] = {}
        self.arrived: dict[str, float] = {}
        self.events: dict[str, threading.Event] = {}

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        text = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
        self.arrived.setdefault(text, time.perf_counter())
        if body["messages"][-1]["role"] == "tool":
            self.events.setdefault(f"followup:{text}", threading.Event()).set()
        return await super()._complete(_Replay(request, body))

    async def _stream(self, script: Script, read: Any = None) -> AsyncIterator[bytes]:
        async for piece in super()._stream(script, read):
            yield piece
            if b'"finish_reason": "tool_calls"' in piece:
                self.ended[script.chunks[0]] = time.perf_counter()


class _Replay:
    """A request whose JSON body was already read."""

    def __init__(self, request: Request, body: Any) -> None:
        self._body = body
        self.headers = request.headers

    async def json(self) -> Any:
        return self._body


def brief(topic: str) -> str:
    return f"Write the lesson.\n\nTopic: {topic}\nLearners: Year 4\nDuration: 45 minutes"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def emulator_dispatch(samples: int) -> list[float]:
    received: dict[str, float] = {}
    got = threading.Event()

    async def sink(request: Request) -> Response:
        received[(await request.body()).decode()] = time.perf_counter()
        got.set()
        return JSONResponse({})

    app = Starlette(routes=[Route("/", sink, methods=["POST"])])
    times = []
    with ServerThread(app) as server:
        queue = CloudTasksQueue.connect(
            PROJECT,
            TASKS_LOCATION,
            TASKS_QUEUE,
            f"http://127.0.0.1:{server.port}/",
            None,
            emulator_host=os.environ["CLOUD_TASKS_EMULATOR_HOST"],
        )
        for n in range(samples):
            got.clear()
            key = f"bare-{n}-{time.time_ns()}"
            start = time.perf_counter()
            await queue.enqueue(QueuedTask(key, key.encode()))
            await asyncio.to_thread(got.wait, 10)
            times.append(received[key] - start)
    return times


def tool_to_start(api: str, token: str, fake: TimedFake, samples: int) -> list[float]:
    times = []
    for n in range(samples):
        topic = f"bench topic {n} {time.time_ns()}"
        ask = f"bench lesson {topic}"
        marker = f"tool:{topic}"
        fake.script(
            ask,
            Script(
                chunks=[marker],
                tool_calls=[("create_lesson", f'{{"topic": "{topic}", "audience": "Year 4"}}')],
                then=Script(chunks=["Ready."]),
            ),
        )
        fake.script(brief(topic), Script(chunks=["# Lesson"]))
        done = fake.events.setdefault(f"followup:{ask}", threading.Event())
        with httpx.stream(
            "POST",
            f"{api}/api/spark/agent/messages",
            json={"text": ask},
            headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
            timeout=30,
        ) as response:
            for _ in response.iter_lines():
                pass
        if not done.wait(30):
            raise SystemExit(f"sample {n}: the follow-up never came; see the logs")
        times.append(fake.arrived[brief(topic)] - fake.ended[marker])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    if not os.environ.get("CLOUD_TASKS_EMULATOR_HOST"):
        raise SystemExit("run through `make bench` (it starts the emulators)")
    stack = Stack(Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="bench-")))
    fake = TimedFake()
    with ServerThread(fake.app) as server:
        env = {
            "OPENAI_BASE_URL": f"http://127.0.0.1:{server.port}/v1",
            "OPENAI_API_KEY": "bench",
            "SPARK_MODEL": "bench",
        }
        try:
            api, _ = start_functions(stack, free_port(), free_port(), env, instances=1)
            token = sign_up(
                os.environ["FIREBASE_AUTH_EMULATOR_HOST"], "tasks@example.com", "bench-pass"
            ).token
            bare = asyncio.run(emulator_dispatch(args.samples))
            full = tool_to_start(api, token, fake, args.samples)
        finally:
            stack.stop()
    ms = 1000
    print(f"task_dispatch: {os.cpu_count()} cores, {args.samples} samples each, all on loopback")
    for name, values in (("(a) emulator dispatch", bare), ("(b) tool call -> tool start", full)):
        print(
            f"{name:30s} p50 {pct(values, 0.5) * ms:7.1f} ms  p90 {pct(values, 0.9) * ms:7.1f} ms"
            f"  mean {statistics.fmean(values) * ms:7.1f} ms"
        )
    for q in (0.5, 0.9):
        extra = (pct(full, q) - pct(bare, q)) * ms
        print(
            f"overhead beyond the emulator's dispatch, p{int(q * 100)}: {extra:7.1f} ms "
            f"(target <= 100 ms: {'met' if extra <= 100 else 'not met'})"
        )


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("task_dispatch"):
        main()
