"""What the api says of itself: that it is alive, its OpenAPI document, its model."""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.schemas.api import ModelResponse
from shared.schemas.openapi.parts import Operation, operation
from spark_http.edge import Edge, Routed


@functools.cache
def _openapi() -> str:
    """Built on first request, not at every instance's start-up (and imported then: the
    document is made from the route table, which holds this module's routes)."""
    from spark_http.openapi import render

    return render()


async def health(edge: Edge, request: Request) -> Response:
    """Liveness for local tooling and load balancers; says nothing about users."""
    return JSONResponse({"status": "ok"})


async def openapi(edge: Edge, request: Request) -> Response:
    """``GET /api/spark/agent/openapi.json``: this API's OpenAPI 3.1 document."""
    return Response(_openapi(), media_type="application/json")


async def model(edge: Edge, request: Request) -> Response:
    """``GET /api/spark/agent/model``: which model answers, and (the demo model)
    the requests it recognises, for a client to offer."""
    await edge.caller(request)
    demo = edge.settings.offline_model
    examples = edge.agent.examples(demo=demo)
    answer = ModelResponse(model=edge.agent.model, demo=demo, examples=examples)
    return JSONResponse(answer.model_dump())


_DOCUMENT: Operation = {
    "summary": "This document.",
    "responses": {"200": {"description": "OpenAPI 3.1."}},
}
_MODEL = operation(
    "Which model answers. With no provider configured it is the "
    "demo model (demo true), and examples lists the requests it recognises "
    "(docs/demo.md), for a client to offer in an empty conversation.",
    (200, "The model.", ModelResponse),
    errors=(401, 405, 500, 503),
)

ROUTES = (
    # Not in the OpenAPI document: a client of the api has no use for it.
    Routed("/healthz", "GET", health, app_check="none"),
    Routed("/api/spark/agent/openapi.json", "GET", openapi, operation=_DOCUMENT),
    Routed("/api/spark/agent/model", "GET", model, operation=_MODEL),
)
