"""The api's one table of routes is the one its OpenAPI document describes."""

from __future__ import annotations

import re

from spark_http.app import ROUTES
from spark_http.openapi import openapi

# Paths a client of the api has no use for, left out of its document.
UNDOCUMENTED = {("/healthz", "get")}
_PARAM = re.compile(r"{[^}]+}")


def _shape(path: str) -> str:
    """``path`` with each parameter written ``{}`` (the two name them differently:
    ``{conversation_id:conversation}`` here, ``{conversationId}`` there)."""
    return _PARAM.sub("{}", path)


def test_the_routes_are_the_paths_and_methods_the_openapi_document_describes() -> None:
    routed = {(_shape(r.path), r.method.lower()) for r in ROUTES}
    documented = {
        (_shape(path), method)
        for path, operations in openapi()["paths"].items()
        for method in operations
    }
    assert len(routed) == len(ROUTES)
    assert routed - UNDOCUMENTED == documented


def test_every_route_but_the_undocumented_declares_its_operation() -> None:
    # The document is made from the routes' operations: one without is not in it.
    lacking = {(r.path, r.method.lower()) for r in ROUTES if r.operation is None}
    assert lacking == UNDOCUMENTED


def test_each_route_names_its_own_endpoint() -> None:
    endpoints = [r.endpoint for r in ROUTES]
    assert len(set(endpoints)) == len(endpoints)
