"""The OpenAPI 3.1 document of the ``api`` function around its paths: its info, its
security scheme and the component schemas of the models its operations name. The paths
come from the route table (``spark_http.openapi`` walks it: each route's module writes its
operation beside it); ``make schemas`` writes the document to ``schemas/openapi.json``,
which a test keeps current, and ``GET /api/spark/agent/openapi.json`` serves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.schemas.openapi.parts import Operation, models

OPENAPI_PATH = Path(__file__).resolve().parents[3] / "schemas" / "openapi.json"


def document(paths: dict[str, dict[str, Operation]]) -> dict[str, Any]:
    """The document of ``paths`` (each an OpenAPI path to its operations by method),
    with a component schema for each model they refer to, and those models' own."""
    schemas: dict[str, Any] = {}
    for model in dict.fromkeys(models(paths)):
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Spark AI Agent API",
            "version": "1",
            "description": "The api function of Spark AI Agent. Errors are "
            '{"error": {"code", "message", "requestId", "details"?, "retryAfter"?}}: the '
            "message in plain words, for a body that did not validate (400) each problem "
            "in details, and for a 429 the seconds to wait (as Retry-After says).",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "Firebase ID token",
                }
            },
        },
    }
