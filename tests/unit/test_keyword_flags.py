"""No call in ``shared/`` or ``functions/`` passes ``True`` or ``False`` positionally.

``decide("alice", c, call, True, None, False)`` says nothing at the call of which
flag is which, and two flags swapped still type-check; ``approved=True, ...,
background=False`` does. Flags are keyword-only parameters (``*, background``).
A default handed to a lookup (``mapping.get(key, True)``) is not a flag.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOKUPS = {"get", "getattr", "pop", "setdefault"}


def bare_flags(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, call) for each call in ``tree`` with a positional ``True``/``False``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in LOOKUPS:
            continue
        if any(isinstance(a, ast.Constant) and isinstance(a.value, bool) for a in node.args):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_no_call_passes_a_bare_boolean() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{line}: {call}"
        for folder in ("shared", "functions")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, call in bare_flags(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], "pass these flags by keyword:\n" + "\n".join(found)


def test_the_check_sees_a_bare_boolean_and_not_a_lookup_default() -> None:
    tree = ast.parse(
        "people.decide('alice', c, call, True, None, False)\n"
        "agent.send(user, text, None, background=True)\n"
        "metadata.get('wire', True)\n"
        "getattr(watch, 'closed', False)\n"
        "follow_up_run(source, now, later, True, None)\n"
    )
    assert [line for line, _ in bare_flags(tree)] == [1, 5]
