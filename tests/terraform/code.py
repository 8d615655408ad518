"""What the code itself says the deployment needs (so the tests stay true as the code
changes): the environment variables shared/config/ declares, and the Firestore
queries and collections shared/ uses, read from its source."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from shared.config import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
QUERY_METHODS = ("where", "order_by")


@dataclass(frozen=True)
class ConfigVariable:
    """One environment variable ``Settings.from_env`` reads."""

    name: str
    field: str  # the Settings field it sets
    kind: str  # int, str, bool or raw (shared.config.Setting)
    minimum: int | None  # for int: the least value it accepts


def config_variables() -> dict[str, ConfigVariable]:
    """Every variable ``Settings.from_env`` reads, by name, from its declarations."""
    return {
        name: ConfigVariable(name, field, setting.kind, setting.minimum)
        for field, (setting, _) in SETTINGS.items()
        for name in setting.names
    }


@dataclass(frozen=True)
class Query:
    where: str  # file:line
    fields: tuple[str, ...]


def firestore_queries(folder: Path = ROOT / "shared") -> list[Query]:
    """Each query chain (``.where(...)``/``.order_by(...)``) in the code, with its fields."""
    queries = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text())
        inner: set[int] = set()
        calls = [n for n in ast.walk(tree) if _is_query_call(n)]
        for call in calls:
            receiver = call.func.value  # type: ignore[attr-defined]
            if _is_query_call(receiver):
                inner.add(id(receiver))
        for call in calls:
            if id(call) in inner:
                continue  # part of a longer chain, counted with it
            fields = []
            node: ast.AST = call
            while _is_query_call(node):
                assert isinstance(node, ast.Call)
                fields.append(_field_of(node))
                node = node.func.value  # type: ignore[attr-defined]
            where = f"{path.relative_to(ROOT)}:{call.lineno}"
            queries.append(Query(where, tuple(reversed(fields))))
    return queries


def _is_query_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in QUERY_METHODS
    )


def _field_of(call: ast.Call) -> str:
    candidates = [
        *call.args[:1],
        *[k.value for k in call.keywords if k.arg in ("field_path", "filter")],
    ]
    for candidate in candidates:
        if isinstance(candidate, ast.Constant) and isinstance(candidate.value, str):
            return candidate.value
        if isinstance(candidate, ast.Call) and candidate.args:  # FieldFilter("f", op, v)
            first = candidate.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                return first.value
    raise AssertionError(f"cannot tell the field of the query at line {call.lineno}")


def firestore_collections(folder: Path = ROOT / "shared" / "store" / "firestore") -> set[str]:
    """The collection ids the Firestore stores name (``.collection("...")``)."""
    trees = [ast.parse(path.read_text()) for path in sorted(folder.rglob("*.py"))]
    return {
        node.args[0].value
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "collection"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }
