"""The import graph of ``shared/`` and ``functions/``, by package, read from the source:
what ``tests/unit/test_architecture.py`` checks for cycles and ``tools/walk.py`` orders
into layers.

Every import counts, at the top of a module or inside a function, and those only for type
checking too: a cycle hidden in a function is still one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# ``functions/`` is on the path of its own process (``spark_http.app``, ``main``).
SOURCES = {"shared": ROOT, "functions": ROOT / "functions"}

Graph = dict[str, dict[str, set[str]]]
"""Package → package it imports → the modules whose imports make that edge."""


def modules() -> dict[str, Path]:
    """Every module, by the name it is imported as."""
    found: dict[str, Path] = {}
    for top, base in SOURCES.items():
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def package(module: str) -> str:
    """The node of ``module`` in the graph: ``shared.agent`` for ``shared.agent.run.loop``,
    ``shared.config`` for itself, ``spark_http`` for ``spark_http.app``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "shared" else parts[0]


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
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


def graph() -> Graph:
    """Package → package it imports → the modules whose imports make that edge."""
    known = modules()
    edges: Graph = {package(m): {} for m in known}
    for module, path in known.items():
        source = package(module)
        for imported in imports(module, path, known):
            target = package(imported)
            if target != source:
                edges[source].setdefault(target, set()).add(f"{module} -> {imported}")
    return edges


def cycle(edges: Graph) -> list[str] | None:
    """One cycle of ``edges`` (its packages in order, the first repeated), if any."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def layers(edges: Graph) -> dict[str, int]:
    """Each package's layer: 0 for one that imports none of ours, else one above the
    highest package it imports (an importing package sits above what it imports).

    Raises:
        ValueError: the graph has a cycle (it has no layers).
    """
    if (found := cycle(edges)) is not None:
        raise ValueError("import cycle " + " -> ".join(found))
    found_layers: dict[str, int] = {}

    def layer(node: str) -> int:
        if node not in found_layers:
            found_layers[node] = 1 + max((layer(n) for n in edges[node]), default=-1)
        return found_layers[node]

    for node in edges:
        layer(node)
    return found_layers
