"""No module of ``shared/`` or ``functions/`` reaches another's private names.

A leading underscore says "mine": a module or class may change it without telling
anyone. Reading one from outside (``obj._x`` on anything but ``self``/``cls``,
``from m import _x``, ``getattr(obj, "_x")``) ties two modules through a name neither
promised, which is how ``People`` came to call ``Agent._lease``. What another module
needs becomes public on purpose, or goes through the facade (``shared/agent/facade.py``).

The only reach-ins allowed are into vendor SDKs, each justified in docs/layout.md
("Departures from the house style") and pinned by its conformance or contract tests.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("shared", "functions")

FIRESTORE_BATCH = "docs/layout.md, Departures: conversation writes are raw protobuf (raw.py)"
ALLOWED: dict[tuple[str, str], str] = {
    # (folder the reach-in is in, private name): why
    ("shared/store/", "_helpers"): FIRESTORE_BATCH,
    ("shared/store/", "_firestore_api"): FIRESTORE_BATCH,
    ("shared/store/", "_database_string"): FIRESTORE_BATCH + " (the request's database)",
    ("shared/store/", "_rpc_metadata"): FIRESTORE_BATCH + " (the request's metadata)",
    ("shared/store/", "_document_path"): FIRESTORE_BATCH + " (each write's document)",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object's own names."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def reach_ins(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, private name, the code) for each reach-in in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not _own(node.value):
            yield node.lineno, node.attr, ast.unparse(node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _private(alias.name):
                    yield node.lineno, alias.name, f"from {node.module} import {alias.name}"
            for part in (node.module or "").split("."):
                if _private(part):
                    yield node.lineno, part, f"from {node.module} import ..."
        elif isinstance(node, ast.Import):
            for alias in node.names:
                for part in alias.name.split("."):
                    if _private(part):
                        yield node.lineno, part, f"import {alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and not _own(node.args[0])
        ):
            yield node.lineno, node.args[1].value, ast.unparse(node)


def _sources() -> Iterator[tuple[str, ast.AST]]:
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _allowance(path: str, name: str) -> tuple[str, str] | None:
    for key in ALLOWED:
        folder, allowed = key
        if path.startswith(folder) and name == allowed:
            return key
    return None


def test_no_module_reaches_another_modules_private_names() -> None:
    found = [
        f"{path}:{line}: {code}"
        for path, tree in _sources()
        for line, name, code in reach_ins(tree)
        if _allowance(path, name) is None
    ]
    assert found == [], "private names reached from outside their module:\n" + "\n".join(found)


def test_every_allowed_reach_in_is_still_made() -> None:
    used = {
        key
        for path, tree in _sources()
        for _, name, _ in reach_ins(tree)
        if (key := _allowance(path, name)) is not None
    }
    assert set(ALLOWED) - used == set(), "allowed but no longer made: remove from ALLOWED"


def test_the_check_sees_each_kind_of_reach_in() -> None:
    tree = ast.parse(
        "from m import _x\n"
        "import pkg._inner\n"
        "agent._lease()\n"
        "self._store.get()\n"
        "self._client.aio._api_client\n"
        "getattr(watch, '_closed', False)\n"
        "self._mine\n"
        "cls._also_mine\n"
        "super()._parents\n"
        "obj.__class__\n"
    )
    assert [name for _, name, _ in sorted(reach_ins(tree))] == [
        "_x",
        "_inner",
        "_lease",
        "_api_client",
        "_closed",
    ]
