"""JSON errors and the SSE response."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from shared.errors import INTERNAL_MESSAGE, SparkError
from shared.schemas.api import ErrorBody, ErrorDetail

log = logging.getLogger(__name__)

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


def error_response(exc: SparkError) -> JSONResponse:
    """``{"error": {"code", "message"}}`` with the error's own status."""
    if exc.status >= 500:
        log.error("%s: %s", exc.code, exc.message)
    body = ErrorBody(error=ErrorDetail(code=exc.code, message=exc.message))
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(body.model_dump(), status_code=exc.status, headers=headers)


def sse_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        body, status_code=200, media_type="text/event-stream", headers=SSE_HEADERS
    )


Handler = Callable[[Request], Awaitable[Response]]


async def guarded(handler: Handler, request: Request) -> Response:
    """``handler``'s response, or the JSON error for what it raised (the one edge wrapper
    of both functions: nothing unforeseen leaks its details to a caller)."""
    try:
        return await handler(request)
    except SparkError as exc:
        return error_response(exc)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(SparkError(INTERNAL_MESSAGE))
