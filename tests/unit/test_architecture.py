"""The shape of the code: the packages of ``shared/`` and ``functions/`` import one
another without a cycle, so each can be read, tested and changed from the bottom up
(``tools/layers.py`` reads the graph from the source).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

from tools.layers import cycle as _cycle
from tools.layers import graph as _graph
from tools.layers import modules as _modules


def test_the_graph_is_read_from_the_source() -> None:
    graph = _graph()
    assert {"shared.agent", "shared.tasks", "shared.queue", "spark_http", "main"} <= set(graph)
    # The handler drives the agent: an edge the test must see to mean anything.
    assert "shared.agent" in graph["shared.tasks"]
    assert "shared.tasks" in graph["shared.wiring"]


def test_packages_import_one_another_without_a_cycle() -> None:
    graph = _graph()
    cycle = _cycle(graph)
    if cycle is not None:
        edges = [f"  {a} -> {b}: {sorted(graph[a][b])}" for a, b in itertools.pairwise(cycle)]
        raise AssertionError("import cycle " + " -> ".join(cycle) + "\n" + "\n".join(edges))


def test_the_agent_imports_nothing_of_the_tasks_package() -> None:
    """``shared.tasks`` drives the agent (its handler claims and runs runs); the agent
    reaches task work only through ``shared.queue.port.TaskPort``."""
    assert sorted(_graph()["shared.agent"].get("shared.tasks", ())) == []


def test_a_cycle_is_found() -> None:
    graph: dict[str, dict[str, set[str]]] = {
        "a": {"b": set()},
        "b": {"c": set()},
        "c": {"a": set()},
        "d": {},
    }
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": set()}, "b": {}}) is None


# The providers' own interfaces and adapters: whoever holds one can call a provider
# without the egress's screen, meter and bounds (DESIGN §13).
PROVIDER_NAMES = {
    "ModelProvider",
    "Transcriber",
    "Speaker",
    "SecretMinter",
    "OpenAIProvider",
    "AnthropicProvider",
    "GeminiProvider",
    "OfflineProvider",
    "ScriptedProvider",
    "OpenAITranscriber",
    "GeminiTranscriber",
    "FakeTranscriber",
    "OpenAIVoice",
    "GeminiVoice",
    "ScriptedVoice",
}
# The adapters and their interfaces, the egress, and the one place that builds them all
# and hands them to the egress.
MAY_HOLD_PROVIDERS = ("shared.llm", "shared.egress", "shared.wiring")
VOICE_ADAPTERS = {"shared.voice.openai_voice", "shared.voice.gemini_voice", "shared.voice.scripted"}


def _names(path: Path) -> set[str]:
    """Every name ``path`` imports, refers to or reads as an attribute."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def test_only_the_egress_holds_a_provider() -> None:
    """Every provider call leaves through ``shared.egress.Egress``: nothing else in
    ``shared/`` or ``functions/`` may name a provider's interface or adapter."""
    offenders = {
        module: sorted(_names(path) & PROVIDER_NAMES)
        for module, path in _modules().items()
        if not module.startswith(MAY_HOLD_PROVIDERS)
        and module not in VOICE_ADAPTERS
        and _names(path) & PROVIDER_NAMES
    }
    assert offenders == {}


def test_the_provider_rule_sees_a_module_that_breaks_it(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "from shared.llm.base import ModelProvider\n\n"
        "def call(p: ModelProvider) -> object:\n    return p.stream\n"
    )
    assert _names(sneaky) & PROVIDER_NAMES == {"ModelProvider"}


# What the tasks package may use of the agent: its face (``Agent``), the deps a run is
# built on (the store, clock and tools the handler works with), the pure changes a tool
# result makes to a conversation, and the throttle of a section's writes. Never the
# runs' machinery (opening, claims, continuation, supervision, slots, the loop).
TASKS_MAY_IMPORT = {
    "shared.agent.facade",
    "shared.agent.deps",
    "shared.agent.results",
    "shared.agent.questions",
    "shared.agent.throttle",
}


def test_the_tasks_package_reaches_the_agent_only_through_its_face() -> None:
    edges = _graph()["shared.tasks"].get("shared.agent", set())
    imported = {edge.split(" -> ")[1] for edge in edges}
    assert imported <= TASKS_MAY_IMPORT, sorted(imported - TASKS_MAY_IMPORT)


def _calls_of(name: str) -> list[str]:
    """Where ``shared/`` and ``functions/`` call a function or method named ``name``."""
    found = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                called = node.func
                if (isinstance(called, ast.Attribute) and called.attr == name) or (
                    isinstance(called, ast.Name) and called.id == name
                ):
                    found.append(f"{module}:{node.lineno}")
    return found


def test_a_run_slot_is_freed_in_one_place() -> None:
    """``RunSlot.release`` is the one caller of the port's ``release_run`` (the ledger's
    pure change of the same name is the scheduler's, its implementation)."""
    calls = _calls_of("release_run")
    assert len(calls) <= 2, calls
    assert any(c.startswith("shared.agent.slot:") for c in calls), calls
