"""The walk: how a piece of work travels through the code, counted as it runs.

``python -m tools.walk`` runs two scenarios in this process, on the in-memory fakes the
unit tests build the agent with (``tests/unit/helpers.py``), and prints three figures
for each:

* (a) ``stream``: a user's first message, streamed through the ``api`` edge, answered
  with a one-token reply;
* (b) ``delivery``: one Cloud Tasks delivery of a task tool's task (given to
  ``TaskHandler.handle``) whose tool ends and whose result the agent then follows up
  (a one-token reply).

The measure. ``sys.setprofile`` sees every Python call and return. A *place* is a
package that data flows through: ``shared.agent``, ``shared.tasks``, ``shared.budget``,
``shared.queue``, ``shared.families``, ``shared.store``, ``shared.egress``, ``shared.tools`` and the
functions (``spark_http``, ``main``); with ``--by module``, each module of those. Every
other frame (the standard library, dependencies, value and helper packages such as
``shared.schemas``, ``shared.errors``, ``shared.clock``, ``shared.ids``,
``shared.config``, ``shared.telemetry``) is no place: control passes through it.

* Control is *in* a place after a call into it, and after a return to it (the nearest
  frame below the returning one that is in a place; a coroutine the event loop starts
  has none, and arrives from nowhere). An ``await`` that waits on the event loop
  suspends its coroutines and later resumes them: neither moves control between places
  (nothing is handed back; the work goes on where it stopped), so neither counts.
* A *stay* is a maximal stretch in which control is in one place: the number of stays
  is one more than the number of times control moves from a place to another.
* A *return* is a move back, caused by a return event, to a place that was left by a
  call (one already on the stack).
* A *climb* is a call from a place into one of a higher layer, the layers being those
  of the import graph (``tools/layers.py``: a package sits above every package it
  imports, so the tasks package sits above the agent that its handler drives).

Fewer stays, returns and climbs mean the work flows down the layers rather than going
back and forth between them.
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from tools.layers import graph, layers, package

ROOT = Path(__file__).resolve().parents[1]
PLACES = frozenset(
    {
        "shared.agent",
        "shared.tasks",
        "shared.budget",
        "shared.queue",
        "shared.families",
        "shared.store",
        "shared.egress",
        "shared.tools",
        "spark_http",
        "main",
    }
)
By = Literal["package", "module"]


@dataclass
class Walk:
    """The figures of one walk, and the places it went through, in order."""

    stays: int = 0
    returns: int = 0
    climbs: int = 0
    path: list[str] = field(default_factory=list)

    def line(self, name: str) -> str:
        return f"{name}: {self.stays} stays, {self.returns} returns, {self.climbs} climbs"


class Walker:
    """A profile function that counts a walk (see the module's docstring)."""

    def __init__(self, by: By = "package", layer: dict[str, int] | None = None) -> None:
        self._by = by
        self._layer = layers(graph()) if layer is None else layer
        self._places: dict[str, str | None] = {}
        self.walk = Walk()
        self._here: str | None = None

    def place(self, module: str) -> str | None:
        """The place of ``module``, or ``None`` for a module that is none."""
        if module not in self._places:
            node = package(module)
            found = node in PLACES
            self._places[module] = (module if self._by == "module" else node) if found else None
        return self._places[module]

    def _of(self, frame: FrameType | None) -> str | None:
        """The place of the nearest frame from ``frame`` down the stack that has one."""
        while frame is not None:
            place = self.place(frame.f_globals.get("__name__", ""))
            if place is not None:
                return place
            frame = frame.f_back
        return None

    def _go(self, place: str) -> None:
        if place != self._here:
            self.walk.stays += 1
            self.walk.path.append(place)
            self._here = place

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return") or _waits(frame, event):
            return
        place = self.place(frame.f_globals.get("__name__", ""))
        if place is None:
            return
        below = self._of(frame.f_back)
        if event == "call":
            if below is not None and below != place and self._rank(below) < self._rank(place):
                self.walk.climbs += 1
            self._go(place)
        elif below is not None:
            if below != place:
                self.walk.returns += 1
            self._go(below)

    def _rank(self, place: str) -> int:
        return self._layer.get(package(place), 0)


_SEND, _YIELD, _RESUME = (dis.opmap[name] for name in ("SEND", "YIELD_VALUE", "RESUME"))


def _waits(frame: FrameType, event: str) -> bool:
    """``event`` is a coroutine suspending in an ``await`` (a ``return`` at the
    ``YIELD_VALUE`` after a ``SEND``), or being resumed there (a ``call`` at the
    ``RESUME`` after them), as CPython 3.11 compiles an ``await``."""
    code, at = frame.f_code.co_code, frame.f_lasti
    if event == "return":
        return at >= 2 and code[at] == _YIELD and code[at - 2] == _SEND
    return at >= 4 and code[at] == _RESUME and code[at - 2] == _YIELD and code[at - 4] == _SEND


@contextmanager
def walking(walker: Walker) -> Iterator[Walk]:
    """Count, with ``walker``, everything this thread runs inside the block."""
    sys.setprofile(walker)
    try:
        yield walker.walk
    finally:
        sys.setprofile(None)


Walked = Callable[[], Awaitable[None]]
Scenario = tuple[Walked, Walked]
"""What to walk, and what to run once it has been walked, not walked: a check of its
outcome, or the test server's shutdown."""


async def _stream() -> Scenario:
    """Scenario (a): what to walk, built first (building is not walked)."""
    from contextlib import AsyncExitStack

    from shared.llm.scripted import ScriptedProvider, Step
    from tests.unit.helpers import api_of, make_service, serving

    api = api_of(make_service(ScriptedProvider([Step.reply("Hi")])))
    headers = {"Accept": "text/event-stream", "Authorization": "Bearer alice-token"}
    served = AsyncExitStack()
    client = await served.enter_async_context(serving(api))

    async def walked() -> None:
        url = "/api/spark/agent/messages"
        response = await client.post(url, headers=headers, json={"text": "hello"})
        assert response.status_code == 200 and "event: done" in response.text

    async def shut_down() -> None:
        # The server's shutdown (it drains what is left in the background) is no part
        # of a message: walked before, it counted a stay and a return of its own.
        await served.aclose()

    return walked, shut_down


async def _delivery() -> Scenario:
    """Scenario (b): a run that calls a task tool, produced first (not walked); then
    the one delivery of its task, walked."""
    from pydantic import BaseModel

    from shared.llm.base import Finish, ToolCallRequest
    from shared.llm.scripted import ScriptedProvider, Step
    from shared.schemas.tasks import TASK_PAYLOAD
    from shared.tools.base import Tool, ToolContext, ToolRegistry
    from tests.unit.helpers import ALICE, Fakes, make_service

    class Topic(BaseModel):
        topic: str

    async def lesson(args: Topic, context: ToolContext) -> dict[str, str]:
        return {"lesson": f"A lesson on {args.topic}"}

    tool = Tool("make_lesson", "Make a lesson.", Topic, "Creating lesson", lesson, "task")
    call = ToolCallRequest("call_1", "make_lesson", '{"topic": "tides"}')
    provider = ScriptedProvider([Step([call, Finish("tool_calls")]), Step.reply("Done")])
    fakes = Fakes()
    harness = make_service(provider, fakes=fakes, tools=ToolRegistry([tool]))
    run = await harness.start(ALICE, "make a lesson on tides")
    await run.execute()
    queued = [t for t in fakes.queue.take() if not t.name.startswith("watch-")]
    assert len(queued) == 1, queued
    task = TASK_PAYLOAD.validate_json(queued[0].body)

    async def walked() -> None:
        # Only the delivery is walked: reading its outcome back is checked after.
        assert await harness.handler().handle(task) == "done"

    async def check() -> None:
        conversation = await harness.store.get(ALICE.uid, run.conversation_id)
        assert conversation is not None and conversation.messages[-1].text == "Done"

    return walked, check


SCENARIOS: dict[str, Callable[[], Awaitable[Scenario]]] = {
    "stream": _stream,
    "delivery": _delivery,
}


async def measure(name: str, by: By = "package") -> Walk:
    """Build scenario ``name``, then walk it."""
    walked, after = await SCENARIOS[name]()
    walker = Walker(by)
    with walking(walker) as walk:
        await walked()
    await after()
    return walk


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by", choices=["package", "module"], default="package")
    parser.add_argument("--path", action="store_true", help="print the places in order")
    parser.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    args = parser.parse_args(argv)
    for name in args.scenarios:
        walk = asyncio.run(measure(name, args.by))
        print(walk.line(name))
        if args.path:
            print("  " + " > ".join(walk.path))


if __name__ == "__main__":
    for extra in (str(ROOT), str(ROOT / "functions")):
        if extra not in sys.path:
            sys.path.insert(0, extra)
    main()
