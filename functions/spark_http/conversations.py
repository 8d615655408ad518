"""The routes of a conversation: a message (to the agent, or verbatim to family members),
its stream resumed, a stop, people's answers, approvals and client tools' results, and a
task's cancel."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.agent import Resumed
from shared.attachments.service import Requested
from shared.auth.base import User
from shared.errors import RequestError
from shared.families.messages import Target, is_shared
from shared.schemas.api import (
    AckResponse,
    AnswersRequest,
    ApprovalRequest,
    CancelTaskResponse,
    DeliveredResponse,
    ResumeResponse,
    SendMessageRequest,
    StopResponse,
    ToolResultRequest,
)
from shared.schemas.openapi.parts import (
    COMMON_ERRORS,
    EVENT_ID,
    SSE,
    Operation,
    error_responses,
    json_body,
    path_id,
    post,
    resumed,
)
from shared.schemas.openapi.parts import CONVERSATION as CONVERSATION_ID
from spark_http.edge import Edge, Routed, in_background
from spark_http.responses import sse_response

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
# An Idempotency-Key: visible ASCII, as the IETF draft's examples (a UUID, a token).
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
CONVERSATION = "/api/spark/agent/conversations/{conversation_id:conversation}"


async def post_message(edge: Edge, request: Request) -> Response:
    """``POST /api/spark/agent/messages``: persist the message, then stream the reply
    (``Accept: text/event-stream``) or acknowledge with 202 and reply from a task."""
    user, body = await edge.read(request, SendMessageRequest)
    background = in_background(request)
    attachments = [
        Requested(a.storage_path, a.content_type, a.size_bytes) for a in body.attachments
    ]
    target = _verbatim(body)
    if target is not None:
        return await _deliver(edge, request, user, body.text or "", target, attachments)
    refuse_idempotency(request)
    sent = await edge.agent.send(
        user,
        body.text or "",
        body.conversation_id,
        background=background,
        when_busy=body.when_busy,
        document_id=body.document_id,
        attachments=attachments,
        voice_session=body.voice_session_id,
        voice=body.voice.storage_path if body.voice else None,
        stream=True,
    )
    if sent.body is not None:
        return sse_response(sent.body)
    ack = AckResponse(
        conversation_id=sent.conversation_id,
        message_id=sent.user_message_id,
        status="queued" if sent.queued else "accepted",
    )
    return JSONResponse(ack.model_dump(by_alias=True), status_code=202)


async def _deliver(
    edge: Edge,
    request: Request,
    user: User,
    text: str,
    target: Target,
    attachments: list[Requested],
) -> Response:
    """A message to family members, delivered verbatim (no model call): 201 JSON,
    with or without ``Accept: text/event-stream`` (there is no reply to stream)."""
    delivered = await edge.agent.deliver(
        user.uid, text, target, attachments=attachments, idempotency_key=_idempotency_key(request)
    )
    answer = DeliveredResponse(
        conversation_id=delivered.conversation_id,
        message_id=delivered.message_id,
        recipients=delivered.recipients,
    )
    headers = {"Idempotent-Replayed": "true"} if delivered.replayed else None
    return JSONResponse(answer.model_dump(by_alias=True), status_code=201, headers=headers)


async def resume(edge: Edge, request: Request) -> Response:
    """``GET .../conversations/{id}/stream``: replay what the client missed of the
    active (or last) run from ``Last-Event-ID``, then follow it to its end."""
    user = await edge.caller(request)
    raw = request.headers.get("last-event-id") or request.query_params.get("lastEventId")
    body = await edge.agent.resume(user.uid, request.path_params["conversation_id"], raw)
    if body is None:
        return Response(status_code=204)
    return sse_response(body)


async def stop(edge: Edge, request: Request) -> Response:
    """``POST .../conversations/{id}/stop``: end the active run wherever it runs."""
    user = await edge.caller(request)
    conversation_id = request.path_params["conversation_id"]
    stopped = await edge.agent.stop(user.uid, conversation_id)
    answer = StopResponse(
        conversation_id=conversation_id, run_id=stopped.run_id, status=stopped.status
    )
    status = 202 if stopped.status == "stopping" else 200
    return JSONResponse(answer.model_dump(by_alias=True), status_code=status)


async def answers(edge: Edge, request: Request) -> Response:
    """``POST .../conversations/{id}/answers``: answer an ``ask_user_question`` call."""
    user, body = await edge.read(request, AnswersRequest)
    resumed = await edge.agent.answer(
        user.uid,
        request.path_params["conversation_id"],
        body.tool_call_id,
        dict(body.answers),
        background=in_background(request),
    )
    return _resumed(edge, resumed)


async def approvals(edge: Edge, request: Request) -> Response:
    """``POST .../conversations/{id}/approvals``: approve or deny a call."""
    user, body = await edge.read(request, ApprovalRequest)
    resumed = await edge.agent.decide(
        user.uid,
        request.path_params["conversation_id"],
        body.tool_call_id,
        approved=body.approved,
        reason=body.reason,
        background=in_background(request),
    )
    return _resumed(edge, resumed)


async def tool_results(edge: Edge, request: Request) -> Response:
    """``POST .../conversations/{id}/tool-results``: a client-executed tool's output."""
    user, body = await edge.read(request, ToolResultRequest)
    resumed = await edge.agent.submit_result(
        user.uid,
        request.path_params["conversation_id"],
        body.tool_call_id,
        body.output,
        ok=body.status == "ok",
        background=in_background(request),
    )
    return _resumed(edge, resumed)


async def cancel_task(edge: Edge, request: Request) -> Response:
    """``POST /api/spark/agent/tasks/{taskId}/cancel``: cancel a task (``200
    cancelled``), or ask its running tool to stop at its next step (``202
    cancelling``); its call gets a result the model sees and the agent follows up."""
    user = await edge.caller(request)
    task_id = request.path_params["task_id"]
    done = await edge.agent.cancel_task(user.uid, task_id)
    answer = CancelTaskResponse(
        task_id=task_id, conversation_id=done.conversation_id, status=done.status
    )
    code = 200 if done.status == "cancelled" else 202
    return JSONResponse(answer.model_dump(by_alias=True), status_code=code)


def _resumed(edge: Edge, resumed: Resumed) -> Response:
    """The follow-up's stream, or 202 saying what happened."""
    run = resumed.run
    if run is not None:
        return sse_response(edge.agent.stream(run))
    answer = ResumeResponse(conversation_id=resumed.conversation_id, status=resumed.status)
    return JSONResponse(answer.model_dump(by_alias=True), status_code=202)


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


def refuse_idempotency(request: Request) -> None:
    """Refuse an ``Idempotency-Key`` on a request that asks the agent for a reply.

    Raises:
        RequestError: it carries one (nothing is written).
    """
    if request.headers.get("idempotency-key") is not None:
        raise RequestError(AGENT_IDEMPOTENCY)


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


def _send() -> Operation:
    send = post(
        "Send a message: the reply streams (Accept: text/event-stream) or a task writes it. "
        "With targetUserId, targetFamily or the conversationId of a direct or family "
        "conversation, the text goes verbatim to family members (no model call): 201; "
        "past the sender's SPARK_FAMILY_MESSAGES_PER_MINUTE or "
        "SPARK_FAMILY_MESSAGE_BYTES_PER_HOUR, 429 with Retry-After, nothing delivered.",
        SendMessageRequest,
        {
            "200": {"description": "The reply, streamed.", "content": SSE},
            "201": {
                "description": "Delivered verbatim to family members (or, for a retry "
                "with the same Idempotency-Key, the first answer: Idempotent-Replayed).",
                "content": json_body(DeliveredResponse),
            },
            "202": {"description": "Accepted or queued.", "content": json_body(AckResponse)},
        },
    )
    send["parameters"] = [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "description": "(Messages to family members) a retry with the same key, by "
            "the same sender within 24 hours, gets the first answer and delivers nothing "
            "again; the same key for a different message is 422 idempotency_key_reused. "
            "On a message to the agent it is 400 (only deliveries keep receipts).",
            "schema": {"type": "string", "pattern": _IDEMPOTENCY_KEY.pattern},
        }
    ]
    # An attachment outside the sender's uploads (403) or one that cannot be used (422).
    send["responses"].update(error_responses(403, 422))
    return send


_STREAM: Operation = {
    "summary": "Resume a run's stream from Last-Event-ID (header or lastEventId).",
    "security": [{"bearer": []}],
    "parameters": [
        CONVERSATION_ID,
        {"name": "Last-Event-ID", "in": "header", "schema": EVENT_ID},
        {"name": "lastEventId", "in": "query", "schema": EVENT_ID},
    ],
    "responses": {
        "200": {"description": "The events missed, then the rest.", "content": SSE},
        "204": {"description": "Nothing to send."},
        **error_responses(*COMMON_ERRORS),
    },
}
_STOP: Operation = {
    "summary": "Stop the conversation's active run wherever it runs.",
    "security": [{"bearer": []}],
    "parameters": [CONVERSATION_ID],
    "responses": {
        "200": {"description": "Stopped.", "content": json_body(StopResponse)},
        "202": {"description": "Stopping.", "content": json_body(StopResponse)},
        **error_responses(*COMMON_ERRORS),
    },
}
_CANCEL_TASK: Operation = {
    "summary": "Cancel one of the caller's tasks. One not yet started, or waiting "
    "for an answer, ends at once (200 cancelled); one whose tool is running stops "
    "at its next step (202 cancelling). Either way its slot frees, its section "
    'ends cancelled, its call gets the result "Cancelled by the user." and the '
    "agent follows up. 404 not_found for a task that is not the caller's; 409 "
    "task_finished once it has ended.",
    "security": [{"bearer": []}],
    "parameters": [path_id("taskId", r"^[A-Za-z0-9_-]{1,200}$")],
    "responses": {
        "200": {"description": "Cancelled.", "content": json_body(CancelTaskResponse)},
        "202": {
            "description": "Its running tool stops at its next step.",
            "content": json_body(CancelTaskResponse),
        },
        **error_responses(401, 404, 405, 409, 500, 503),
    },
}

# The message route first: it is the one most requests name, and matching stops at it.
ROUTES = (
    Routed("/api/spark/agent/messages", "POST", post_message, "consume", _send()),
    Routed(f"{CONVERSATION}/stream", "GET", resume, operation=_STREAM),
    Routed(f"{CONVERSATION}/stop", "POST", stop, operation=_STOP),
    Routed(
        f"{CONVERSATION}/answers",
        "POST",
        answers,
        "consume",
        resumed("Answer an ask_user_question call.", AnswersRequest),
    ),
    Routed(
        f"{CONVERSATION}/approvals",
        "POST",
        approvals,
        "consume",
        resumed("Approve or deny a call awaiting approval.", ApprovalRequest),
    ),
    Routed(
        f"{CONVERSATION}/tool-results",
        "POST",
        tool_results,
        "consume",
        resumed("The output of a client-executed tool.", ToolResultRequest),
    ),
    Routed("/api/spark/agent/tasks/{task_id}/cancel", "POST", cancel_task, operation=_CANCEL_TASK),
)
