"""The ``api`` function's routes: parse, authenticate, validate, delegate, map errors."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.agent.facade import Agent
from shared.agent.people import Resumed
from shared.attachments.service import Requested
from shared.auth.base import TokenVerifier, User
from shared.config import Settings
from shared.errors import MethodNotAllowed, NotFound
from shared.schemas.api import (
    AckResponse,
    AnswersRequest,
    ApprovalRequest,
    KeptVersionInfo,
    LessonVersionsResponse,
    RestoreRequest,
    RestoreResponse,
    ResumeResponse,
    SendMessageRequest,
    StopResponse,
    ToolResultRequest,
    UploadRequest,
    UploadResponse,
)
from shared.schemas.openapi import render as render_openapi
from spark_http.requests import bearer_token, read_json, wants_event_stream
from spark_http.responses import guarded, sse_response

log = logging.getLogger(__name__)

Handler = Callable[[Request, str], Awaitable[Response]]


@functools.cache
def _openapi() -> str:
    """Built on first request, not at every instance's start-up."""
    return render_openapi()


_PER_CONVERSATION = ("stream", "stop", "answers", "approvals", "tool-results")
# Firestore reserves ids of the form __x__: such a conversation cannot exist (404).
_CONVERSATION = re.compile(
    r"^/api/spark/agent/conversations/((?!__[^/]*__/)[A-Za-z0-9_-]{1,64})/([\w-]+)$"
)
_LESSON = re.compile(
    r"^/api/spark/lessons/((?!__[^/]*__/)[A-Za-z0-9_-]{1,128})/(versions|restore)$"
)


class ApiApp:
    """Serves ``/api/spark/agent/...`` (and ``/api/spark/lessons/...``) for one process."""

    def __init__(self, agent: Agent, verifier: TokenVerifier, settings: Settings) -> None:
        self._agent = agent
        self._verifier = verifier
        self._settings = settings
        self._routes: dict[str, dict[str, Handler]] = {
            "messages": {"POST": self.post_message},
            "uploads": {"POST": self.post_upload},
            "stream": {"GET": self.resume},
            "stop": {"POST": self.stop},
            "answers": {"POST": self.answers},
            "approvals": {"POST": self.approvals},
            "tool-results": {"POST": self.tool_results},
            "versions": {"GET": self.lesson_versions},
            "restore": {"POST": self.restore_lesson},
            "health": {"GET": self.health},
            "openapi": {"GET": self.openapi},
        }

    async def __call__(self, request: Request) -> Response:
        return await guarded(self._dispatch, request)

    async def _dispatch(self, request: Request) -> Response:
        path = request.url.path.rstrip("/") or "/"
        conversation_id = ""
        if path == "/api/spark/agent/messages":
            route = "messages"
        elif path == "/api/spark/agent/uploads":
            route = "uploads"
        elif path == "/healthz":
            route = "health"
        elif path == "/api/spark/agent/openapi.json":
            route = "openapi"
        elif (match := _CONVERSATION.match(path)) and match[2] in _PER_CONVERSATION:
            route, conversation_id = match[2], match[1]
        elif match := _LESSON.match(path):
            route, conversation_id = match[2], match[1]  # the id in the path: a lesson's
        else:
            raise NotFound(f"No such endpoint: {request.url.path}")
        methods = self._routes[route]
        handler = methods.get(request.method)
        if handler is None:
            raise MethodNotAllowed(
                f"Use {' or '.join(methods)} on {request.url.path}.", tuple(methods)
            )
        return await handler(request, conversation_id)

    async def health(self, request: Request, _: str) -> Response:
        """Liveness for local tooling and load balancers; says nothing about users."""
        return JSONResponse({"status": "ok"})

    async def openapi(self, request: Request, _: str) -> Response:
        """``GET /api/spark/agent/openapi.json``: this API's OpenAPI 3.1 document."""
        return Response(_openapi(), media_type="application/json")

    async def _authenticate(self, request: Request) -> User:
        return await self._verifier.verify(bearer_token(request))

    async def post_message(self, request: Request, _: str) -> Response:
        """``POST /api/spark/agent/messages``: persist the message, then stream the reply
        (``Accept: text/event-stream``) or acknowledge with 202 and reply from a task."""
        user = await self._authenticate(request)
        body = await read_json(request, SendMessageRequest, self._settings.max_request_bytes)
        # Without a stream no work may follow the response (Cloud Functions throttles
        # the CPU then): a Cloud Task produces the reply.
        background = not wants_event_stream(request)
        attachments = [
            Requested(a.storage_path, a.content_type, a.size_bytes) for a in body.attachments
        ]
        sent = await self._agent.send(
            user,
            body.text,
            body.conversation_id,
            background=background,
            when_busy=body.when_busy,
            document_id=body.document_id,
            attachments=attachments,
        )
        run = sent.run
        if run is None:
            ack = AckResponse(
                conversation_id=sent.conversation_id,
                message_id=sent.user_message_id,
                status="queued" if sent.queued else "accepted",
            )
            return JSONResponse(ack.model_dump(by_alias=True), status_code=202)
        return sse_response(self._agent.stream(run))

    async def post_upload(self, request: Request, _: str) -> Response:
        """``POST /api/spark/agent/uploads``: start an upload session for one file under
        the caller's ``{uid}/uploads/``; the client ``PUT``s the bytes to its URL."""
        user = await self._authenticate(request)
        body = await read_json(request, UploadRequest, self._settings.max_request_bytes)
        upload = await self._agent.start_upload(
            user.uid,
            body.file_name,
            body.content_type,
            body.size_bytes,
            request.headers.get("origin"),
        )
        answer = UploadResponse(
            storage_path=upload.storage_path,
            upload_url=upload.url,
            method="PUT",
            headers={"Content-Type": upload.content_type},
            expires_at=upload.expires_at,
        )
        return JSONResponse(answer.model_dump(by_alias=True, mode="json"), status_code=201)

    async def resume(self, request: Request, conversation_id: str) -> Response:
        """``GET .../conversations/{id}/stream``: replay what the client missed of the
        active (or last) run from ``Last-Event-ID``, then follow it to its end."""
        user = await self._authenticate(request)
        raw = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
        body = await self._agent.resume(user.uid, conversation_id, raw)
        if body is None:
            return Response(status_code=204)
        return sse_response(body)

    async def stop(self, request: Request, conversation_id: str) -> Response:
        """``POST .../conversations/{id}/stop``: end the active run wherever it runs."""
        user = await self._authenticate(request)
        stopped = await self._agent.stop(user.uid, conversation_id)
        answer = StopResponse(
            conversation_id=conversation_id, run_id=stopped.run_id, status=stopped.status
        )
        status = 202 if stopped.status == "stopping" else 200
        return JSONResponse(answer.model_dump(by_alias=True), status_code=status)

    async def answers(self, request: Request, conversation_id: str) -> Response:
        """``POST .../conversations/{id}/answers``: answer an ``ask_user_question`` call."""
        user = await self._authenticate(request)
        body = await read_json(request, AnswersRequest, self._settings.max_request_bytes)
        resumed = await self._agent.answer(
            user.uid,
            conversation_id,
            body.tool_call_id,
            dict(body.answers),
            background=not wants_event_stream(request),
        )
        return self._resumed(resumed)

    async def approvals(self, request: Request, conversation_id: str) -> Response:
        """``POST .../conversations/{id}/approvals``: approve or deny a call."""
        user = await self._authenticate(request)
        body = await read_json(request, ApprovalRequest, self._settings.max_request_bytes)
        resumed = await self._agent.decide(
            user.uid,
            conversation_id,
            body.tool_call_id,
            approved=body.approved,
            reason=body.reason,
            background=not wants_event_stream(request),
        )
        return self._resumed(resumed)

    async def tool_results(self, request: Request, conversation_id: str) -> Response:
        """``POST .../conversations/{id}/tool-results``: a client-executed tool's output."""
        user = await self._authenticate(request)
        body = await read_json(request, ToolResultRequest, self._settings.max_request_bytes)
        resumed = await self._agent.submit_result(
            user.uid,
            conversation_id,
            body.tool_call_id,
            body.output,
            ok=body.status == "ok",
            background=not wants_event_stream(request),
        )
        return self._resumed(resumed)

    async def lesson_versions(self, request: Request, lesson_id: str) -> Response:
        """``GET /api/spark/lessons/{id}/versions``: the lesson's kept versions."""
        user = await self._authenticate(request)
        found = await self._agent.lesson_versions(user.uid, lesson_id)
        answer = LessonVersionsResponse(
            lesson_id=lesson_id,
            current_version=found.current.version if found.current else None,
            versions=[
                KeptVersionInfo(
                    version=k.version, title=k.title, saved_at=k.saved_at, characters=k.characters
                )
                for k in found.kept
            ],
        )
        return JSONResponse(answer.model_dump(by_alias=True, mode="json"))

    async def restore_lesson(self, request: Request, lesson_id: str) -> Response:
        """``POST /api/spark/lessons/{id}/restore``: a kept version becomes the lesson's
        next one (the version it replaces is kept)."""
        user = await self._authenticate(request)
        body = await read_json(request, RestoreRequest, self._settings.max_request_bytes)
        restored = await self._agent.restore_lesson(user.uid, lesson_id, body.version)
        answer = RestoreResponse(
            lesson_id=lesson_id, version=restored.version, restored_from=body.version
        )
        return JSONResponse(answer.model_dump(by_alias=True))

    def _resumed(self, resumed: Resumed) -> Response:
        """The follow-up's stream, or 202 saying what happened."""
        run = resumed.run
        if run is not None:
            return sse_response(self._agent.stream(run))
        answer = ResumeResponse(conversation_id=resumed.conversation_id, status=resumed.status)
        return JSONResponse(answer.model_dump(by_alias=True), status_code=202)

    async def drain(self) -> None:
        """Wait for runs still going (their clients may have left)."""
        await self._agent.drain()
