"""The one wiring module (``shared/wiring.py``): a deployment's agent is built on the
real stores, every one of them. ``assemble`` gives tests in-memory stores for what they
leave out; a store ``build_components`` forgot to pass would run on one of those in
production, answering as if all were well and losing everything at the next start."""

from __future__ import annotations

import ast
import inspect

from shared import wiring


def _held(annotation: str) -> bool:
    """Whether a parameter of ``assemble`` is somewhere data is kept."""
    return "Store" in annotation or annotation.startswith(("Accounts", "TaskQueue"))


def test_build_components_passes_assemble_every_store() -> None:
    parameters = list(inspect.signature(wiring.assemble).parameters.values())
    stores = {p.name for p in parameters if _held(str(p.annotation))}
    assert {"store", "ledger", "lessons", "queue", "files", "feedback", "auth"} <= stores
    tree = ast.parse(inspect.getsource(wiring.build_components))
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "assemble"
    ]
    assert len(calls) == 1
    call = calls[0]
    passed = {p.name for p in parameters[: len(call.args)]}
    passed |= {k.arg for k in call.keywords if k.arg is not None}
    assert stores - passed == set(), "left to an in-memory store in production"
