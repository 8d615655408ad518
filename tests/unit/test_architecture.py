"""The shape of the code: the packages of ``shared/`` and ``functions/`` import one
another without a cycle, so each can be read, tested and changed from the bottom up.

Every import counts, at the top of a module or inside a function, and those only for type
checking too: a cycle hidden in a function is still one.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# ``functions/`` is on the path of its own process (``spark_http.app``, ``main``).
SOURCES = {"shared": ROOT, "functions": ROOT / "functions"}


def _modules() -> dict[str, Path]:
    """Every module, by the name it is imported as."""
    found: dict[str, Path] = {}
    for top, base in SOURCES.items():
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _package(module: str) -> str:
    """The node of ``module`` in the graph: ``shared.agent`` for ``shared.agent.loop``,
    ``shared.config`` for itself, ``spark_http`` for ``spark_http.app``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "shared" else parts[0]


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of ours that ``module`` imports."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from shared.tasks import ledger`` imports the module ``shared.tasks.ledger``.
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for name in names:
            # ``import shared.tasks.ledger`` also imports its packages; the deepest one of
            # ours is the one that matters.
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                if ".".join(parts[:end]) in known:
                    yield ".".join(parts[:end])
                    break


def _graph() -> dict[str, dict[str, set[str]]]:
    """Package → package it imports → the modules whose imports make that edge."""
    known = _modules()
    graph: dict[str, dict[str, set[str]]] = {_package(m): {} for m in known}
    for module, path in known.items():
        source = _package(module)
        for imported in _imports(module, path, known):
            target = _package(imported)
            if target != source:
                graph[source].setdefault(target, set()).add(f"{module} -> {imported}")
    return graph


def _cycle(graph: dict[str, dict[str, set[str]]]) -> list[str] | None:
    """One cycle of ``graph`` (its packages in order, the first repeated), if any."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


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
    "WhisperTranscriber",
    "EspeakVoice",
}
# The adapters and their interfaces, the egress, and the one place that builds them all
# and hands them to the egress.
MAY_HOLD_PROVIDERS = ("shared.llm", "shared.egress", "shared.wiring")
VOICE_ADAPTERS = {
    "shared.voice.openai_voice",
    "shared.voice.gemini_voice",
    "shared.voice.scripted",
    "shared.voice.whisper_local",
    "shared.voice.espeak_voice",
}


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
