"""The ``api`` function's routes: parse, authenticate, validate, delegate, map errors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.agent.service import AgentService
from shared.agent.sse import EventChannel, sse_stream
from shared.auth.base import TokenVerifier, User
from shared.errors import INTERNAL_MESSAGE, MethodNotAllowed, NotFound, SparkError
from shared.schemas.api import AckResponse, SendMessageRequest
from spark_http.requests import bearer_token, read_json, wants_event_stream
from spark_http.responses import error_response, sse_response

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]


class ApiApp:
    """Serves ``/api/spark/agent/...`` for one process."""

    def __init__(self, service: AgentService, verifier: TokenVerifier) -> None:
        self._service = service
        self._verifier = verifier
        self._routes: dict[str, dict[str, Handler]] = {
            "/api/spark/agent/messages": {"POST": self.post_message},
            "/healthz": {"GET": self.health},
        }
        # Runs outlive their response when a client disconnects; hold them here.
        self._runs: set[asyncio.Task[None]] = set()

    async def __call__(self, request: Request) -> Response:
        try:
            return await self._dispatch(request)
        except SparkError as exc:
            return error_response(exc)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.url.path)
            return error_response(SparkError(INTERNAL_MESSAGE))

    async def _dispatch(self, request: Request) -> Response:
        methods = self._routes.get(request.url.path.rstrip("/") or "/")
        if methods is None:
            raise NotFound(f"No such endpoint: {request.url.path}")
        handler = methods.get(request.method)
        if handler is None:
            raise MethodNotAllowed(f"Use {' or '.join(methods)} on {request.url.path}.")
        return await handler(request)

    async def health(self, request: Request) -> Response:
        """Liveness for local tooling and load balancers; says nothing about users."""
        return JSONResponse({"status": "ok"})

    async def _authenticate(self, request: Request) -> User:
        return await self._verifier.verify(bearer_token(request))

    async def post_message(self, request: Request) -> Response:
        """``POST /api/spark/agent/messages``: persist the message, then stream the reply
        (``Accept: text/event-stream``) or acknowledge with 202 and reply from a task."""
        user = await self._authenticate(request)
        body = await read_json(
            request, SendMessageRequest, self._service.settings.max_request_bytes
        )
        if not wants_event_stream(request):
            return await self._acknowledge(user, body)
        run = await self._service.start(user, body.text, body.conversation_id)
        channel = EventChannel()
        task = asyncio.create_task(run.execute(channel.emit), name=f"run-{run.record.run_id}")
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        task.add_done_callback(lambda _: channel.end())
        keepalive = self._service.settings.keepalive_seconds
        return sse_response(sse_stream(channel, keepalive))

    async def _acknowledge(self, user: User, body: SendMessageRequest) -> Response:
        # No work may follow the response (Cloud Functions throttles the CPU then):
        # a Cloud Task produces the reply.
        run = await self._service.start(user, body.text, body.conversation_id, queued=True)
        try:
            await self._service.scheduler.enqueue_reply(
                user.uid, run.conversation_id, run.record.run_id
            )
        except SparkError as exc:
            await run.abort(exc)
            raise
        assert run.user_message is not None
        ack = AckResponse(conversation_id=run.conversation_id, message_id=run.user_message.id)
        return JSONResponse(ack.model_dump(by_alias=True), status_code=202)

    async def drain(self) -> None:
        """Wait for runs still going (their clients may have left)."""
        if self._runs:
            await asyncio.gather(*self._runs, return_exceptions=True)
