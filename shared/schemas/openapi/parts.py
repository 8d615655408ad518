"""The building blocks of the OpenAPI document's operations: JSON bodies, error
responses, path parameters and the bearer security every route but the document's own
has. Each route's module in ``functions/spark_http/`` writes its operation with them,
beside the route; ``spark_http.openapi`` walks the routes into the document."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from shared.schemas.api import (
    CONVERSATION_ID_PATTERN,
    EVENT_ID_PATTERN,
    FAMILY_ID_PATTERN,
    LESSON_ID_PATTERN,
    ErrorBody,
    ResumeResponse,
)

Operation = dict[str, Any]
"""An OpenAPI operation object: what one route's method does, as the document says it."""


class Ref(dict[str, str]):
    """A ``$ref`` to a model's component schema that still knows its model, so the
    document's components are the models its operations name (and no list kept beside
    them). It is a ``dict``: written to JSON it is the ``$ref`` alone."""

    def __init__(self, model: type[BaseModel]) -> None:
        super().__init__({"$ref": f"#/components/schemas/{model.__name__}"})
        self.model = model


def ref(model: type[BaseModel]) -> Ref:
    return Ref(model)


def models(value: Any) -> Iterator[type[BaseModel]]:
    """Every model an operation (or any part of one) refers to, depth first."""
    if isinstance(value, Ref):
        yield value.model
    elif isinstance(value, dict):
        for item in value.values():
            yield from models(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from models(item)


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": ref(model)}}


def error_responses(*statuses: int) -> dict[str, Any]:
    errors = {
        str(s): {"description": "An error.", "content": json_body(ErrorBody)} for s in statuses
    }
    if "404" in errors:
        # A path the Functions Framework itself cannot route (a control character in a
        # path segment) never reaches the api: the framework answers with plain text.
        errors["404"]["content"] = {
            **json_body(ErrorBody),
            "text/plain": {"schema": {"type": "string"}},
        }
    return errors


SSE = {
    "text/event-stream": {
        "schema": {
            "type": "string",
            # The events themselves are schemas/events.schema.json's (tools/eventschema.py),
            # not listed again here.
            "description": "Server-Sent Events, each an `event:` line naming its type and "
            "a `data:` line of JSON, as schemas/events.schema.json describes them; done or "
            "error ends the stream (DESIGN §4).",
        }
    }
}
CONVERSATION = {
    "name": "conversationId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": CONVERSATION_ID_PATTERN},
}
LESSON = {
    "name": "lessonId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": LESSON_ID_PATTERN},
}
EVENT_ID = {
    "type": "string",
    "pattern": EVENT_ID_PATTERN,
    "description": "An event id this API sent: {runId}:{parts}:{chars} or {runId}:end.",
}
COMMON_ERRORS = (400, 401, 404, 405, 409, 413, 415, 429, 500, 502, 503, 504, 507)


def post(summary: str, body: type[BaseModel], ok: dict[str, Any]) -> Operation:
    return {
        "summary": summary,
        "security": [{"bearer": []}],
        "requestBody": {"required": True, "content": json_body(body)},
        "responses": {**ok, **error_responses(*COMMON_ERRORS)},
    }


def resumed(summary: str, body: type[BaseModel]) -> Operation:
    ok = {
        "200": {"description": "The agent's follow-up, streamed.", "content": SSE},
        "202": {"description": "Recorded; see status.", "content": json_body(ResumeResponse)},
    }
    operation = post(summary, body, ok)
    operation["parameters"] = [CONVERSATION]
    return operation


FAMILY_ERRORS = (400, 401, 403, 404, 405, 409, 410, 413, 415, 429, 500, 503)


def path_id(name: str, pattern: str = FAMILY_ID_PATTERN) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": pattern},
    }


def operation(
    summary: str,
    ok: tuple[int, str, type[BaseModel] | None],
    body: type[BaseModel] | None = None,
    parameters: tuple[dict[str, Any], ...] = (),
    errors: tuple[int, ...] = FAMILY_ERRORS,
) -> Operation:
    """A bearer-secured operation with one answer (a status, its description and its
    JSON model or none), its body's model if it takes one, and its error statuses."""
    status, description, answer = ok
    response: dict[str, Any] = {"description": description}
    if answer is not None:
        response["content"] = json_body(answer)
    operation: Operation = {
        "summary": summary,
        "security": [{"bearer": []}],
        "responses": {str(status): response, **error_responses(*errors)},
    }
    if body is not None:
        operation["requestBody"] = {"required": True, "content": json_body(body)}
    if parameters:
        operation["parameters"] = list(parameters)
    return operation
