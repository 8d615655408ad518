"""The ``api`` function's routes: parse, authenticate, validate, delegate, map errors."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Route

from shared.agent.facade import Agent
from shared.agent.people import Resumed
from shared.attachments.service import Requested
from shared.auth.base import TokenVerifier, User
from shared.config import Settings
from shared.errors import (
    FamilyNotFound,
    InviteNotFound,
    MemberNotFound,
    MethodNotAllowed,
    NotFound,
    RequestError,
)
from shared.families.membership import NO_INVITE, NO_MEMBER, NOT_YOURS
from shared.families.messages import NO_CONVERSATION, Target, is_shared
from shared.llm.demo import EXAMPLES
from shared.schemas.api import (
    AckResponse,
    AnswersRequest,
    ApprovalRequest,
    CancelTaskResponse,
    CreateFamilyRequest,
    DeliveredResponse,
    FamilyInfo,
    FamilyResponse,
    InviteInfo,
    InviteRequest,
    InviteResponse,
    InvitesResponse,
    JoinRequest,
    KeptVersionInfo,
    LessonProgressInfo,
    LessonVersionsResponse,
    MemberProgressInfo,
    ModelResponse,
    ProgressResponse,
    RestoreRequest,
    RestoreResponse,
    ResumeResponse,
    RoleRequest,
    SendMessageRequest,
    SettingsInfo,
    SettingsRequest,
    SettingsResponse,
    SpeechRequest,
    StopResponse,
    ToolResultRequest,
    UploadRequest,
    UploadResponse,
    VoiceSessionResponse,
)
from shared.schemas.openapi import render as render_openapi
from shared.schemas.server import Family
from shared.store.base import NO_LESSON, reserved
from shared.tasks.scheduler import NO_TASK
from spark_http.requests import Body, bearer_token, read_json, wants_event_stream
from spark_http.responses import guarded, sse_response

log = logging.getLogger(__name__)

Handler = Callable[[Request, str], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]
FAMILIES = "/api/spark/families"
TASKS = "/api/spark/agent/tasks"
ME = "/api/spark/me"
VOICE = "/api/spark/agent/voice"


FAMILY_TEXT_ONLY = (
    "A message to family members is delivered as its text (and attachments): it cannot "
    "carry a voice clip, a live-voice utterance (input: voice) or a documentId. Type the "
    "message, or ask Spark AI Agent to send it for you."
)
AGENT_IDEMPOTENCY = (
    "The Idempotency-Key header is honoured only on messages to family members "
    "(targetUserId, targetFamily or a direct or family conversationId). Send a message "
    "to Spark AI Agent without it."
)


@functools.cache
def _openapi() -> str:
    """Built on first request, not at every instance's start-up."""
    return render_openapi()


_PER_CONVERSATION = ("stream", "stop", "answers", "approvals", "tool-results", "files", "speech")
# An Idempotency-Key: visible ASCII, as the IETF draft's examples (a UUID, a token).
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
_CONVERSATION = re.compile(r"^/api/spark/agent/conversations/([A-Za-z0-9_-]{1,64})/([\w-]+)$")
_LESSON = re.compile(r"^/api/spark/lessons/([A-Za-z0-9_-]{1,128})/(versions|restore)$")
_FAMILY = f"{FAMILIES}/{{family_id}}"
# The routes with path parameters (Starlette's): path, method and ``ApiApp``'s endpoint.
ROUTES_WITH_PARAMS = (
    (f"{TASKS}/{{task_id}}/cancel", "POST", "cancel_task"),
    (f"{VOICE}/sessions", "POST", "start_voice_session"),
    (FAMILIES, "POST", "create_family"),
    (f"{FAMILIES}/current", "GET", "current_family"),
    (f"{FAMILIES}/join", "POST", "join_family"),
    (f"{_FAMILY}/invites", "POST", "create_invite"),
    (f"{_FAMILY}/invites", "GET", "list_invites"),
    (f"{_FAMILY}/invites/{{invite_id}}", "DELETE", "revoke_invite"),
    (f"{_FAMILY}/members/{{member_id}}", "PATCH", "set_role"),
    (f"{_FAMILY}/members/{{member_id}}", "DELETE", "remove_member"),
    (f"{_FAMILY}/progress", "GET", "family_progress"),
    (f"{ME}/settings", "PATCH", "update_settings"),
)
# What an id in the path that can name nothing answers, by its parameter: as an id of
# its kind that names nothing does. Firestore reserves ids of the form __x__ (``reserved``;
# it refuses them as ids and as map keys): no document has one, so every id in a path is
# judged by it before anything reads the store (which would fail, a 5xx).
_NAMES_NOTHING: dict[str, Callable[[], NotFound]] = {
    "conversation_id": lambda: NotFound(NO_CONVERSATION),
    "lesson_id": lambda: NotFound(NO_LESSON),
    "task_id": lambda: NotFound(NO_TASK),
    "family_id": lambda: FamilyNotFound(NOT_YOURS),
    "invite_id": lambda: InviteNotFound(NO_INVITE),
    "member_id": lambda: MemberNotFound(NO_MEMBER),
}


def _path_ids(params: dict[str, str]) -> None:
    """Every id in a request's path, by the one rule for ids (``reserved``).

    Raises:
        NotFound: one of them can name nothing (the first, in the path's order).
    """
    for name, value in params.items():
        if reserved(value):
            found = _NAMES_NOTHING.get(name)
            raise found() if found else NotFound("Nothing has this id.")


def _in_background(request: Request) -> bool:
    """Whether a Cloud Task produces the reply: without a stream no work may follow the
    response (Cloud Functions throttles the CPU then)."""
    return not wants_event_stream(request)


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
            "files": {"GET": self.conversation_file},
            "speech": {"POST": self.speech},
            "versions": {"GET": self.lesson_versions},
            "restore": {"POST": self.restore_lesson},
            "health": {"GET": self.health},
            "openapi": {"GET": self.openapi},
            "model": {"GET": self.model},
        }
        # Newer route families are matched by Starlette's routes (path parameters), and
        # dispatched here, so that every answer, 404 and 405 included, is our JSON.
        self._routes_with_params: list[Route] = [
            Route(path, getattr(self, endpoint), methods=[method])
            for path, method, endpoint in ROUTES_WITH_PARAMS
        ]

    async def __call__(self, request: Request) -> Response:
        return await guarded(self._dispatch, request)

    def _with_params(self, request: Request, path: str) -> tuple[Endpoint, Request] | None:
        """The endpoint of a route with path parameters that ``path`` names, and the
        request with its ``path_params``; ``None`` if no such route has this path.

        Raises:
            MethodNotAllowed: the path is one of them, the method is not.
        """
        scope = {**request.scope, "path": path}
        allowed: list[str] = []
        for route in self._routes_with_params:
            match, child = route.matches(scope)
            if match is Match.FULL:
                _path_ids(child.get("path_params", {}))
                return route.endpoint, Request({**scope, **child}, request.receive)
            if match is Match.PARTIAL:
                allowed += sorted(route.methods or ())
        if allowed:
            raise MethodNotAllowed(
                f"Use {' or '.join(allowed)} on {request.url.path}.", tuple(allowed)
            )
        return None

    async def _dispatch(self, request: Request) -> Response:
        path = request.url.path.rstrip("/") or "/"
        # Only these prefixes have routes with parameters: the others (a message, a
        # stream) skip matching them.
        if path.startswith((FAMILIES, TASKS, ME, VOICE)) and (
            found := self._with_params(request, path)
        ):
            endpoint, routed = found
            return await endpoint(routed)
        conversation_id = ""
        if path == "/api/spark/agent/messages":
            route = "messages"
        elif path == "/api/spark/agent/uploads":
            route = "uploads"
        elif path == "/healthz":
            route = "health"
        elif path == "/api/spark/agent/openapi.json":
            route = "openapi"
        elif path == "/api/spark/agent/model":
            route = "model"
        elif (match := _CONVERSATION.match(path)) and match[2] in _PER_CONVERSATION:
            _path_ids({"conversation_id": match[1]})
            route, conversation_id = match[2], match[1]
        elif match := _LESSON.match(path):
            _path_ids({"lesson_id": match[1]})
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

    async def model(self, request: Request, _: str) -> Response:
        """``GET /api/spark/agent/model``: which model answers, and (the demo model)
        the requests it recognises, for a client to offer."""
        await self._authenticate(request)
        demo = self._settings.offline_model
        examples = list(EXAMPLES) if demo else []
        answer = ModelResponse(model=self._agent.model, demo=demo, examples=examples)
        return JSONResponse(answer.model_dump())

    async def openapi(self, request: Request, _: str) -> Response:
        """``GET /api/spark/agent/openapi.json``: this API's OpenAPI 3.1 document."""
        return Response(_openapi(), media_type="application/json")

    async def _authenticate(self, request: Request) -> User:
        return await self._verifier.verify(bearer_token(request))

    async def _read(self, request: Request, model: type[Body]) -> tuple[User, Body]:
        """The caller, then the body as ``model`` (a stranger is refused before the body
        is read)."""
        user = await self._authenticate(request)
        return user, await read_json(request, model, self._settings.max_request_bytes)

    async def post_message(self, request: Request, _: str) -> Response:
        """``POST /api/spark/agent/messages``: persist the message, then stream the reply
        (``Accept: text/event-stream``) or acknowledge with 202 and reply from a task."""
        user, body = await self._read(request, SendMessageRequest)
        background = _in_background(request)
        attachments = [
            Requested(a.storage_path, a.content_type, a.size_bytes) for a in body.attachments
        ]
        target = _verbatim(body)
        if target is not None:
            return await self._deliver(request, user, body.text or "", target, attachments)
        if request.headers.get("idempotency-key") is not None:
            raise RequestError(AGENT_IDEMPOTENCY)
        sent = await self._agent.send(
            user,
            body.text or "",
            body.conversation_id,
            background=background,
            when_busy=body.when_busy,
            document_id=body.document_id,
            attachments=attachments,
            voice_session=body.voice_session_id,
            voice=body.voice.storage_path if body.voice else None,
        )
        if sent.hearing is not None:
            return sse_response(self._agent.stream_hearing(sent.hearing))
        run = sent.run
        if run is None:
            ack = AckResponse(
                conversation_id=sent.conversation_id,
                message_id=sent.user_message_id,
                status="queued" if sent.queued else "accepted",
            )
            return JSONResponse(ack.model_dump(by_alias=True), status_code=202)
        return sse_response(self._agent.stream(run))

    async def _deliver(
        self,
        request: Request,
        user: User,
        text: str,
        target: Target,
        attachments: list[Requested],
    ) -> Response:
        """A message to family members, delivered verbatim (no model call): 201 JSON,
        with or without ``Accept: text/event-stream`` (there is no reply to stream)."""
        delivered = await self._agent.delivery.deliver(
            user.uid,
            text,
            target,
            attachments=attachments,
            via="user",
            idempotency_key=_idempotency_key(request),
        )
        answer = DeliveredResponse(
            conversation_id=delivered.conversation_id,
            message_id=delivered.message_id,
            recipients=delivered.recipients,
        )
        headers = {"Idempotent-Replayed": "true"} if delivered.replayed else None
        return JSONResponse(answer.model_dump(by_alias=True), status_code=201, headers=headers)

    async def conversation_file(self, request: Request, conversation_id: str) -> Response:
        """``GET .../conversations/{id}/files?path=…``: a file a message in the caller's
        copy of the conversation carries (one another member sent included)."""
        user = await self._authenticate(request)
        path = request.query_params.get("path", "")
        if not path:
            raise RequestError("Name the file: ?path=<the storagePath of a message's file>.")
        found = await self._agent.delivery.file(user.uid, conversation_id, path)
        shown = "inline" if found.content_type.startswith("image/") else "attachment"
        safe = _header_safe(found.name)
        headers = {
            "Content-Disposition": f'{shown}; filename="{safe}"',
            "Cache-Control": "private, max-age=300",
            "X-Content-Type-Options": "nosniff",
        }
        return Response(found.data, media_type=found.content_type, headers=headers)

    async def post_upload(self, request: Request, _: str) -> Response:
        """``POST /api/spark/agent/uploads``: start an upload session for one file under
        the caller's ``{uid}/uploads/``; the client ``PUT``s the bytes to its URL."""
        user, body = await self._read(request, UploadRequest)
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
        user, body = await self._read(request, AnswersRequest)
        resumed = await self._agent.answer(
            user.uid,
            conversation_id,
            body.tool_call_id,
            dict(body.answers),
            background=_in_background(request),
        )
        return self._resumed(resumed)

    async def approvals(self, request: Request, conversation_id: str) -> Response:
        """``POST .../conversations/{id}/approvals``: approve or deny a call."""
        user, body = await self._read(request, ApprovalRequest)
        resumed = await self._agent.decide(
            user.uid,
            conversation_id,
            body.tool_call_id,
            approved=body.approved,
            reason=body.reason,
            background=_in_background(request),
        )
        return self._resumed(resumed)

    async def tool_results(self, request: Request, conversation_id: str) -> Response:
        """``POST .../conversations/{id}/tool-results``: a client-executed tool's output."""
        user, body = await self._read(request, ToolResultRequest)
        resumed = await self._agent.submit_result(
            user.uid,
            conversation_id,
            body.tool_call_id,
            body.output,
            ok=body.status == "ok",
            background=_in_background(request),
        )
        return self._resumed(resumed)

    async def cancel_task(self, request: Request) -> Response:
        """``POST /api/spark/agent/tasks/{taskId}/cancel``: cancel a task (``200
        cancelled``), or ask its running tool to stop at its next step (``202
        cancelling``); its call gets a result the model sees and the agent follows up."""
        user = await self._authenticate(request)
        task_id = request.path_params["task_id"]
        done = await self._agent.cancel_task(user.uid, task_id)
        answer = CancelTaskResponse(
            task_id=task_id, conversation_id=done.conversation_id, status=done.status
        )
        code = 200 if done.status == "cancelled" else 202
        return JSONResponse(answer.model_dump(by_alias=True), status_code=code)

    async def start_voice_session(self, request: Request) -> Response:
        """``POST /api/spark/agent/voice/sessions``: a live-audio session's provider
        secret, within the caller's daily allowance."""
        user = await self._authenticate(request)
        session = await self._agent.start_voice_session(user.uid)
        answer = VoiceSessionResponse(
            session_id=session.session_id,
            secret=session.secret,
            expires_at=session.expires_at,
            ends_at=session.ends_at,
            provider="google" if session.provider == "google" else "openai",
            model=session.model,
        )
        # The secret is shown once: no cache may keep it.
        return JSONResponse(
            answer.model_dump(by_alias=True, mode="json"),
            status_code=201,
            headers={"Cache-Control": "no-store"},
        )

    async def speech(self, request: Request, conversation_id: str) -> Response:
        """``POST .../conversations/{id}/speech``: a reply read aloud, streamed (and kept,
        so a replay is read from Cloud Storage)."""
        user, body = await self._read(request, SpeechRequest)
        spoken = await self._agent.speak(user.uid, conversation_id, body.message_id)
        return StreamingResponse(
            spoken.chunks,
            media_type=spoken.media_type,
            headers={
                "Cache-Control": "private, no-cache",
                "X-Spark-Speech": "cached" if spoken.cached else "made",
            },
        )

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
        user, body = await self._read(request, RestoreRequest)
        restored = await self._agent.restore_lesson(user.uid, lesson_id, body.version)
        answer = RestoreResponse(
            lesson_id=lesson_id, version=restored.version, restored_from=body.version
        )
        return JSONResponse(answer.model_dump(by_alias=True))

    # -- families (DESIGN §8) ----------------------------------------------------------

    async def create_family(self, request: Request) -> Response:
        """``POST /api/spark/families``: a new family, with the caller as its parent."""
        user, body = await self._read(request, CreateFamilyRequest)
        family = await self._agent.families.create(user, body.name, body.display_name)
        return _family(family, status=201)

    async def current_family(self, request: Request) -> Response:
        """``GET /api/spark/families/current``: the caller's family (404 ``no_family``)."""
        user = await self._authenticate(request)
        return _family(await self._agent.families.current(user.uid))

    async def join_family(self, request: Request) -> Response:
        """``POST /api/spark/families/join``: join with an invite link's token."""
        user, body = await self._read(request, JoinRequest)
        return _family(await self._agent.families.join(user, body.token, body.display_name))

    async def create_invite(self, request: Request) -> Response:
        """``POST .../families/{id}/invites``: a new link; its token is shown only here."""
        user, body = await self._read(request, InviteRequest)
        made = await self._agent.families.invite(
            user.uid,
            request.path_params["family_id"],
            body.role,
            max_uses=body.max_uses,
            expires_in_hours=body.expires_in_hours,
        )
        answer = InviteResponse(
            invite=InviteInfo.of(made.invite, "active"), token=made.token, link=made.link
        )
        # The token is a secret shown once: no cache may keep it.
        return JSONResponse(
            answer.model_dump(by_alias=True, mode="json"),
            status_code=201,
            headers={"Cache-Control": "no-store"},
        )

    async def list_invites(self, request: Request) -> Response:
        """``GET .../families/{id}/invites``: the family's invites, newest first."""
        user = await self._authenticate(request)
        listed = await self._agent.families.invites(user.uid, request.path_params["family_id"])
        answer = InvitesResponse(invites=[InviteInfo.of(i.invite, i.status) for i in listed])
        return JSONResponse(answer.model_dump(by_alias=True, mode="json"))

    async def revoke_invite(self, request: Request) -> Response:
        """``DELETE .../families/{id}/invites/{inviteId}``: the link stops working at once."""
        user = await self._authenticate(request)
        params = request.path_params
        await self._agent.families.revoke(user.uid, params["family_id"], params["invite_id"])
        return Response(status_code=204)

    async def set_role(self, request: Request) -> Response:
        """``PATCH .../families/{id}/members/{uid}``: a member's new role."""
        user, body = await self._read(request, RoleRequest)
        params = request.path_params
        family = await self._agent.families.set_role(
            user.uid, params["family_id"], params["member_id"], body.role
        )
        return _family(family)

    async def remove_member(self, request: Request) -> Response:
        """``DELETE .../families/{id}/members/{uid}``: leave (oneself) or remove (parents)."""
        user = await self._authenticate(request)
        params = request.path_params
        await self._agent.families.remove(user.uid, params["family_id"], params["member_id"])
        return Response(status_code=204)

    async def family_progress(self, request: Request) -> Response:
        """``GET .../families/{id}/progress``: each member's lessons and their blanks."""
        user = await self._authenticate(request)
        family_id = request.path_params["family_id"]
        members = await self._agent.family_progress(user.uid, family_id)
        answer = ProgressResponse(
            family_id=family_id,
            members=[
                MemberProgressInfo(
                    user_id=m.user_id,
                    display_name=m.display_name,
                    role=m.role,
                    lessons=[
                        LessonProgressInfo(
                            lesson_id=lp.lesson_id,
                            title=lp.title,
                            updated_at=lp.updated_at,
                            blanks=lp.blanks,
                            answered=lp.answered,
                        )
                        for lp in m.lessons
                    ],
                )
                for m in members
            ],
        )
        return JSONResponse(answer.model_dump(by_alias=True, mode="json"))

    async def update_settings(self, request: Request) -> Response:
        """``PATCH /api/spark/me/settings``: the caller's settings, truth and mirror."""
        user, body = await self._read(request, SettingsRequest)
        settings = await self._agent.preferences.update(
            user.uid, ai_reads_family_messages=body.ai_reads_family_messages
        )
        answer = SettingsResponse(settings=SettingsInfo.model_validate(settings.model_dump()))
        return JSONResponse(answer.model_dump(by_alias=True, mode="json"))

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


def _verbatim(body: SendMessageRequest) -> Target | None:
    """Whom a message goes to verbatim, if it is one for family members (``None``: it
    is for the agent). ``whenBusy`` is ignored there: a delivery never waits on a reply.

    Raises:
        RequestError: it is for family members and carries a voice clip, a live-voice
            utterance or a lesson (only the agent takes those); nothing is written.
    """
    target = None
    if body.target_user_id is not None:
        target = Target(user_id=body.target_user_id)
    elif body.target_family:
        target = Target(family=True)
    elif body.conversation_id is not None and is_shared(body.conversation_id):
        target = Target(conversation_id=body.conversation_id)
    if target is not None and (
        body.voice is not None or body.input == "voice" or body.document_id is not None
    ):
        raise RequestError(FAMILY_TEXT_ONLY)
    return target


def _header_safe(name: str) -> str:
    """``name`` as a quoted header value may carry it (printable ASCII, no quote)."""
    return "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in name)


def _idempotency_key(request: Request) -> str | None:
    """The ``Idempotency-Key`` header, if sent.

    Raises:
        RequestError: it is not 1–255 visible ASCII characters.
    """
    key = request.headers.get("idempotency-key")
    if key is not None and not _IDEMPOTENCY_KEY.match(key):
        raise RequestError(
            "The Idempotency-Key header must be 1 to 255 visible ASCII characters, such as a UUID."
        )
    return key


def _family(family: Family, status: int = 200) -> Response:
    answer = FamilyResponse(family=FamilyInfo.of(family))
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"), status_code=status)
