"""Reading what callers send: bearer tokens and bounded JSON bodies."""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from shared.auth.base import bearer
from shared.errors import PayloadTooLarge, RequestError, Unauthenticated, UnsupportedMediaType
from spark_http.problems import invalid_body

Body = TypeVar("Body", bound=BaseModel)

# curl -d sends form-urlencoded by default; we still read the body as JSON.
_JSON_LIKE = ("", "application/json", "application/x-www-form-urlencoded", "text/plain")


def bearer_token(request: Request) -> str:
    token = bearer(request.headers.get("authorization"))
    if token is None:
        raise Unauthenticated("Sign in first: send 'Authorization: Bearer <Firebase ID token>'.")
    return token


def wants_event_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "").lower()


def _bytes(limit: int) -> str:
    """``1 MiB (1,048,576 bytes)``: binary units, named as such, and the exact count."""
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit} ({limit:,} bytes)"
    return f"{limit:,} bytes"


def too_large(limit: int) -> str:
    return f"The request body must be at most {_bytes(limit)}."


def declared_size(request: Request, limit: int) -> int | None:
    """The body's length as its ``Content-Length`` says (``None``: it does not say).

    Raises:
        PayloadTooLarge: it says more than ``limit`` bytes.
    """
    declared = request.headers.get("content-length")
    if declared is None or not declared.isdigit():
        return None
    if int(declared) > limit:
        raise PayloadTooLarge(too_large(limit))
    return int(declared)


def json_only(request: Request) -> None:
    """Raises:
    UnsupportedMediaType: the body is said to be something other than JSON."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in _JSON_LIKE:
        raise UnsupportedMediaType(
            "Send the request body as JSON (Content-Type: application/json)."
        )


async def read_bounded(request: Request, limit: int) -> bytes:
    """The raw body, refused past ``limit`` bytes."""
    declared_size(request, limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(too_large(limit))
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, model: type[Body], limit: int) -> Body:
    """The body parsed as ``model``.

    Raises:
        UnsupportedMediaType, PayloadTooLarge, RequestError: with a message saying why.
    """
    json_only(request)
    return parse_json(await read_bounded(request, limit), model)


MAX_DEPTH = 32
TOO_DEEP = f"The request body nests deeper than {MAX_DEPTH} levels."


def _depth(value: object) -> int:
    """How deeply ``value`` nests (walked without recursion, so it cannot overflow)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


class _NotFinite(Exception):
    pass


def _no_constant(name: str) -> object:
    """Python's json reads NaN and Infinity, which are not JSON: refuse them."""
    raise _NotFinite(name)


def parse_json(raw: bytes, model: type[Body]) -> Body:
    """``raw`` parsed as ``model``.

    Raises:
        RequestError: not JSON, not an object, or not valid for ``model``.
    """
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except _NotFinite:
        raise RequestError("The request body holds NaN or Infinity, which JSON has not.") from None
    except (UnicodeDecodeError, ValueError):
        # ValueError covers JSONDecodeError and an integer past Python's 4,300 digits.
        raise RequestError("The request body is not valid JSON.") from None
    except RecursionError:
        raise RequestError(TOO_DEEP) from None
    if not isinstance(data, dict):
        raise RequestError("The request body must be a JSON object.")
    if _depth(data) > MAX_DEPTH:
        raise RequestError(TOO_DEEP)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_body(model, exc) from None
