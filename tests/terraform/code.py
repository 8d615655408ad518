"""What the code itself says the deployment needs, read from its source (so the tests
stay true as the code changes): the environment variables shared/config.py reads, and
the Firestore queries and collections shared/ uses."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READERS = ("_int", "_str", "_bool", "_raw")
QUERY_METHODS = ("where", "order_by")


@dataclass(frozen=True)
class ConfigVariable:
    """One environment variable ``Settings.from_env`` reads."""

    name: str
    field: str  # the Settings field it sets
    reader: str  # _int, _str, _bool or _raw
    minimum: int | None  # for _int: the least value it accepts


def config_variables(path: Path = ROOT / "shared" / "config.py") -> dict[str, ConfigVariable]:
    """Every variable read in ``Settings.from_env``, by name."""
    tree = ast.parse(path.read_text())
    (from_env,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "from_env"
    ]
    (settings_call,) = [
        node
        for node in ast.walk(from_env)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "cls"
        and node.keywords
    ]
    # A variable is read in the call's keywords (field = keyword) or before it, into a
    # local the keywords use (``provider, model = parse_model(_str(env, "SPARK_MODEL"))``).
    sources = [(str(k.arg), k.value) for k in settings_call.keywords]
    sources += [
        (_target_name(statement), statement)
        for statement in from_env.body
        if isinstance(statement, ast.Assign)
    ]
    found = {}
    for field, source in sources:
        for node in ast.walk(source):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in READERS
            ):
                continue
            name = node.args[1]
            assert isinstance(name, ast.Constant) and isinstance(name.value, str)
            minimum = None
            if node.func.id == "_int":
                given = [k.value for k in node.keywords if k.arg == "minimum"]
                minimum = ast.literal_eval(given[0]) if given else 1
            found.setdefault(name.value, ConfigVariable(name.value, field, node.func.id, minimum))
    return found


def _target_name(statement: ast.Assign) -> str:
    """The name(s) an assignment sets, as one label (``provider, model``)."""
    return ", ".join(
        node.id
        for target in statement.targets
        for node in ast.walk(target)
        if isinstance(node, ast.Name)
    )


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
    candidates = [*call.args[:1], *[k.value for k in call.keywords if k.arg == "field_path"]]
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
