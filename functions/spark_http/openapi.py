"""The OpenAPI 3.1 document of the ``api`` function, generated from its route table:
each route's operation is written once, beside the route in its module, and this walks
every route the router serves into the document (``make schemas`` runs it as
``python -m spark_http.openapi`` to write ``schemas/openapi.json``; a test keeps that
file current)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from typing import Any

from shared.schemas.openapi import OPENAPI_PATH, document
from shared.schemas.openapi.parts import Operation
from spark_http.app import ROUTES
from spark_http.edge import Routed

_PARAM = re.compile(r"{[^}]+}")


def _path(routed: Routed, operation: Operation) -> str:
    """The route's path as OpenAPI writes it: each Starlette parameter
    (``{conversation_id:conversation}``) named as the operation's path parameters
    name it, in order (``{conversationId}``).

    Raises:
        ValueError: the path and the operation's path parameters do not pair up.
    """
    names = [p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"]
    found = _PARAM.findall(routed.path)
    if len(found) != len(names):
        raise ValueError(
            f"{routed.method} {routed.path}: its operation names {len(names)} path "
            f"parameters, the path has {len(found)}"
        )
    named = iter(names)
    return _PARAM.sub(lambda _: "{" + next(named) + "}", routed.path)


def paths(routes: Iterable[Routed] = ROUTES) -> dict[str, dict[str, Operation]]:
    """Each documented route's operation, by OpenAPI path and method (a route with no
    operation is one a client has no use for: left out)."""
    found: dict[str, dict[str, Operation]] = {}
    for routed in routes:
        if routed.operation is not None:
            path = _path(routed, routed.operation)
            found.setdefault(path, {})[routed.method.lower()] = routed.operation
    return found


def openapi() -> dict[str, Any]:
    """The document (deterministic: the same code gives the same bytes)."""
    return document(paths())


def render() -> str:
    return json.dumps(openapi(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    OPENAPI_PATH.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {OPENAPI_PATH}\n")


if __name__ == "__main__":
    main()
