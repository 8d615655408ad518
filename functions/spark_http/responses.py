"""JSON errors and the SSE response."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from opentelemetry.context import Context
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from shared.errors import (
    INTERNAL_MESSAGE,
    Busy,
    InvalidBody,
    MethodNotAllowed,
    ParentControls,
    RateLimited,
    SparkError,
)
from shared.observe import setup as observe
from shared.observe import tracing
from shared.schemas.api import ErrorBody, ErrorDetail, Problem
from spark_http.logs import LoggedStream, access

log = logging.getLogger(__name__)

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


def request_id(request: Request) -> str:
    """The id a user can quote: Cloud Run's trace id when there is one, else a fresh id."""
    trace = request.headers.get("x-cloud-trace-context", "").split("/", 1)[0]
    if trace and trace.isalnum() and len(trace) <= 64:
        return trace
    return "req_" + secrets.token_hex(8)


def error_response(exc: SparkError, request_id: str | None = None) -> JSONResponse:
    """``{"error": {"code", "message", "requestId", "details"?, "retryAfter"?}}`` with
    the error's own status (``details`` for a body that did not validate, ``retryAfter``
    for a limit reached, as its ``Retry-After``). The
    message is ours; what an SDK said (``detail``) goes to the log under the request id."""
    if exc.status >= 500 or exc.detail:
        log.warning("request %s failed: %s: %s (%s)", request_id, exc.code, exc.message, exc.detail)
    problems = [Problem(**item) for item in exc.details] if isinstance(exc, InvalidBody) else None
    wait = exc.retry_after if isinstance(exc, RateLimited) else None
    detail = ErrorDetail(
        code=exc.code,
        message=exc.message,
        request_id=request_id,
        details=problems,
        retry_after=wait,
        reason=exc.reason if isinstance(exc, ParentControls) else None,
    )
    body = ErrorBody(error=detail)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if isinstance(exc, RateLimited | Busy):
        headers = {"Retry-After": str(exc.retry_after)}
    if isinstance(exc, MethodNotAllowed):
        headers = {"Allow": ", ".join(exc.allow)}
    return JSONResponse(
        body.model_dump(by_alias=True, exclude_none=True), status_code=exc.status, headers=headers
    )


def sse_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return LoggedStream(body, status_code=200, media_type="text/event-stream", headers=SSE_HEADERS)


Handler = Callable[[Request], Awaitable[Response]]


async def guarded(handler: Handler, request: Request, parent: Context | None = None) -> Response:
    """``handler``'s response, or the JSON error for what it raised (the one edge wrapper
    of both functions: nothing unforeseen leaks its details to a caller), logged as it
    ends (``logs.access``), under a span that ends with it (a child of ``parent``: the
    trace a task carries, ``tasks.py``). Every refusal by a user's limit that reaches a
    caller passes here, so it is counted here (``metrics.limit_refused``)."""
    started, rid = time.monotonic(), request_id(request)
    span = tracing.request(request.method, request.url.path, parent)
    with tracing.current(span):
        try:
            response = await handler(request)
        except SparkError as exc:
            if isinstance(exc, RateLimited) and (metrics := observe.process_metrics()):
                metrics.limit_refused(exc.limit)
            response = error_response(exc, rid)
        except Exception:
            log.exception(
                "unhandled error on %s %s",
                request.method,
                request.url.path,
                extra={"requestId": rid, "trace": rid},
            )
            response = error_response(SparkError(INTERNAL_MESSAGE), rid)
    return access(request, response, rid, started, span)
