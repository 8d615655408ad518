"""Structured logs that Cloud Logging understands: one JSON object per line with
``severity``, ``message``, the trace (when Cloud Run passes one) and the ids a log line
was given (``conversationId``, ``runId``, ``requestId``) as ``extra``.

Nothing here logs a token, a key or a message's text: callers log ids and codes, and an
SDK's own words only as a failure's ``detail``. Each request is logged once, at INFO, as
it ends (``access``): method, path, status, duration and request id, in Cloud Logging's
``httpRequest`` fields; never its body, headers or query.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from opentelemetry.trace import INVALID_SPAN, Span
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from shared.observe import tracing

_IDS = ("conversationId", "runId", "requestId", "userId", "taskId", "httpRequest")

access_log = logging.getLogger("spark_http.access")


class CloudLoggingFormatter(logging.Formatter):
    """``logging`` records as Cloud Logging's structured JSON."""

    def __init__(self, project: str | None = None) -> None:
        super().__init__()
        self._project = project

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
        }
        for name in _IDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        trace = getattr(record, "trace", None)
        if trace and self._project:
            entry["logging.googleapis.com/trace"] = f"projects/{self._project}/traces/{trace}"
        if record.exc_info:
            entry["stack_trace"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(project: str | None = None, level: int = logging.INFO) -> None:
    """Send the process's logs to stderr as structured JSON (Cloud Logging's format),
    traces named in ``project``."""
    handler = logging.StreamHandler()
    handler.setFormatter(CloudLoggingFormatter(project))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class LoggedStream(StreamingResponse):
    """A stream that logs its request once it is over (its last byte sent, or its client
    gone): around the whole response, where wrapping its body resumed one more generator
    for every token."""

    ended: Callable[[], None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.ended is not None:
                self.ended()


def access(
    request: Request,
    response: Response,
    request_id: str,
    started: float,
    span: Span = INVALID_SPAN,
) -> Response:
    """Log ``request`` once it ends: now, or for a stream when its last byte is sent (or
    its client leaves), with the time it took from ``started`` (``time.monotonic``); its
    ``span`` ends then too."""
    if isinstance(response, LoggedStream):
        response.ended = functools.partial(
            _log, request, response.status_code, request_id, started, span
        )
    elif isinstance(response, StreamingResponse):
        response.body_iterator = _logged(
            response.body_iterator, request, response, request_id, started, span
        )
    else:
        _log(request, response.status_code, request_id, started, span)
    return response


async def _logged(
    body: AsyncIterable[Any],
    request: Request,
    response: Response,
    request_id: str,
    started: float,
    span: Span,
) -> AsyncIterator[Any]:
    try:
        async for chunk in body:
            yield chunk
    finally:
        _log(request, response.status_code, request_id, started, span)


def _log(request: Request, status: int, request_id: str, started: float, span: Span) -> None:
    tracing.answered(span, status)
    seconds = time.monotonic() - started
    path = request.url.path  # never the query: it may carry what a client should not send
    access_log.info(
        "%s %s %d %.0f ms",
        request.method,
        path,
        status,
        seconds * 1000,
        extra={
            "requestId": request_id,
            "httpRequest": {
                "requestMethod": request.method,
                "requestUrl": path,
                "status": status,
                "latency": f"{seconds:.3f}s",
            },
        },
    )
