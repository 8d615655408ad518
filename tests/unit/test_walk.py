"""``tools/walk.py`` counts a tiny known call chain right."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from typing import Any

from tools.walk import Walker, walking

LAYERS = {"shared.store": 0, "shared.agent": 1, "shared.tasks": 2}


def _module(name: str, source: str, **names: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(names)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def _chain() -> Callable[[], int]:
    """tasks.top calls agent.step, which hands store.apply agent.change (a callback: the
    store climbs into the agent); then tasks.top hands store.apply a lambda of its own."""
    store = _module("shared.store.tiny", "def apply(change):\n    return change(1)\n")
    agent = _module(
        "shared.agent.tiny",
        "def change(x):\n    return x + 1\n\ndef step():\n    return store.apply(change)\n",
        store=store,
    )
    tasks = _module(
        "shared.tasks.tiny",
        "def top():\n    return agent.step() + store.apply(lambda x: x)\n",
        store=store,
        agent=agent,
    )
    top: Callable[[], int] = tasks.top
    return top


def test_the_walk_counts_stays_returns_and_climbs() -> None:
    top = _chain()
    walker = Walker("package", LAYERS)
    with walking(walker) as walk:
        assert top() == 3
    assert walk.path == [
        "shared.tasks",
        "shared.agent",
        "shared.store",
        "shared.agent",  # the callback: a climb
        "shared.store",  # a return
        "shared.agent",  # a return
        "shared.tasks",  # a return
        "shared.store",
        "shared.tasks",  # the lambda: a climb
        "shared.store",  # a return
        "shared.tasks",  # a return
    ]
    assert (walk.stays, walk.returns, walk.climbs) == (11, 5, 2)


def test_an_await_that_waits_on_the_event_loop_moves_nothing() -> None:
    """The agent awaits the store, which waits on the event loop (its coroutines are
    suspended, then resumed) before it returns: one call and one return all the same."""
    store = _module(
        "shared.store.tiny_async",
        "import asyncio\n\nasync def get():\n    await asyncio.sleep(0)\n    return 1\n",
    )
    agent = _module(
        "shared.agent.tiny_async",
        "async def step():\n    return await store.get() + await store.get()\n",
        store=store,
    )
    walker = Walker("package", LAYERS)

    async def walked() -> int:
        with walking(walker):
            result: int = await agent.step()
        return result

    assert asyncio.run(walked()) == 2
    # (the last return, to the test, is no place's)
    assert walker.walk.path == [
        "shared.agent",
        "shared.store",
        "shared.agent",
        "shared.store",
        "shared.agent",
    ]
    assert (walker.walk.stays, walker.walk.returns, walker.walk.climbs) == (5, 2, 0)


def test_helper_packages_are_no_place() -> None:
    walker = Walker("package", LAYERS)
    assert walker.place("shared.schemas.documents") is None
    assert walker.place("shared.agent.run.loop") == "shared.agent"
    assert Walker("module", LAYERS).place("shared.agent.run.loop") == "shared.agent.run.loop"
