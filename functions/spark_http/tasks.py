"""The ``tasks`` function: accepts only our queue's calls, then delegates to ``TaskHandler``.

Answers 200 when the delivery is done with (including redeliveries of finished work),
409 when another delivery holds the task (the queue retries later), and an error
status when the work failed in a way a later delivery may not (the queue retries).
"""

from __future__ import annotations

import logging

from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.auth.tasks import TaskCallerVerifier
from shared.errors import MethodNotAllowed, RequestError
from shared.observe import propagation, tracing
from shared.schemas.tasks import TASK_PAYLOAD, AnyTask
from shared.tasks.handler import TaskHandler
from spark_http.requests import read_bounded
from spark_http.responses import guarded

log = logging.getLogger(__name__)

MAX_TASK_BYTES = 64 * 1024


class TasksApp:
    """Serves the private ``tasks`` function."""

    def __init__(self, handler: TaskHandler, verifier: TaskCallerVerifier) -> None:
        self._handler = handler
        self._verifier = verifier

    async def __call__(self, request: Request) -> Response:
        # The delivery continues the trace its task carries (the run that enqueued it).
        parent = propagation.extract(request.headers) if tracing.tracing() else None
        return await guarded(self._serve, request, parent)

    async def _serve(self, request: Request) -> Response:
        if request.url.path.rstrip("/") == "/healthz" and request.method == "GET":
            return JSONResponse({"status": "ok"})
        if request.method != "POST":
            raise MethodNotAllowed("Tasks are delivered with POST.", ("POST",))
        raw = await read_bounded(request, MAX_TASK_BYTES)
        await self._verifier.verify(request.headers, raw)
        task = _parse(raw, TASK_PAYLOAD)
        outcome = await self._handler.handle(task)
        if outcome == "busy":
            return JSONResponse({"status": "busy"}, status_code=409)
        return JSONResponse({"status": "done"})


def _parse(raw: bytes, adapter: TypeAdapter[AnyTask]) -> AnyTask:
    try:
        return adapter.validate_json(raw)
    except ValueError:
        raise RequestError("The task body is not a valid task.") from None
