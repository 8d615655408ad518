"""The AI SDK's chat routes, for front ends built on its ``useChat`` and
``DefaultChatTransport``: a turn posted as the transport posts it, its reply as the UI
message stream, and that stream resumed from any instance (``GET .../chat/{id}/stream``,
the transport's ``resume``). A stop is our own route's, for every listener."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from shared.agent import HEADERS
from shared.schemas.openapi.parts import COMMON_ERRORS, Operation, error_responses, json_body
from shared.schemas.uichat import ChatRequest
from spark_http.chatbody import read_chat
from spark_http.edge import Edge, Routed
from spark_http.requests import declared_size, json_only
from spark_http.responses import sse_response

CHAT = "/api/spark/agent/chat"


def _ui_response(body: AsyncIterator[bytes]) -> Response:
    response = sse_response(body)
    response.headers.update(HEADERS)
    return response


async def chat(edge: Edge, request: Request) -> Response:
    """``POST /api/spark/agent/chat``: a user's message, or answers to the calls that
    wait (approvals, client tools' outputs), and the reply that follows.

    The body holds its declared length (or the bound, when it declares none) of the
    process's budget while it is read and its files are kept (``chatbody``)."""
    user = await edge.caller(request)
    json_only(request)
    limit = edge.settings.max_chat_request_bytes
    size = declared_size(request, limit)
    wait = edge.settings.chat_body_wait_seconds
    async with edge.chat_bodies.held(limit if size is None else size, wait):
        body = await read_chat(request, limit)
        reply = await edge.agent.chat(user, body)
    return _ui_response(reply)


async def resume(edge: Edge, request: Request) -> Response:
    """``GET /api/spark/agent/chat/{id}/stream``: the reply being written, from its
    start, then live; 204 when none is."""
    user = await edge.caller(request)
    conversation_id = request.path_params["chat_id"]
    body = await edge.agent.chat_resume(user.uid, conversation_id)
    if body is None:
        return Response(status_code=204)
    return _ui_response(body)


_UI_STREAM = {
    "text/event-stream": {
        "schema": {"type": "string"},
        "description": "The AI SDK's UI message stream (header x-vercel-ai-ui-message-stream: "
        "v1): one `data: {json}` chunk a line (start, start-step, text-start/-delta/-end, "
        "tool-input-available, tool-output-available/-error, tool-approval-request, "
        "data-task, data-question, finish-step, finish, abort, error), then `data: [DONE]`.",
    }
}
_CHAT_ID = {
    "name": "chatId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": r"^[A-Za-z0-9_-]{1,64}$"},
    "description": "The chat's id: its conversation's.",
}
_TURN: Operation = {
    "summary": "A turn of an AI SDK chat: the newest user message (a new one, or the "
    "chat's conversation made with its id), or the approvals and client tools' "
    "outputs that answer calls waiting in the conversation; everything else in "
    "messages is ignored (the stored conversation is the history).",
    "security": [{"bearer": []}],
    "requestBody": {"required": True, "content": json_body(ChatRequest)},
    "responses": {
        "200": {"description": "The reply, streamed.", "content": _UI_STREAM},
        **error_responses(*COMMON_ERRORS),
    },
}
_RESUME: Operation = {
    "summary": "The chat's reply being written, from its start, then live, from any "
    "instance; 204 when none is.",
    "security": [{"bearer": []}],
    "parameters": [_CHAT_ID],
    "responses": {
        "200": {"description": "The reply, streamed.", "content": _UI_STREAM},
        "204": {"description": "Nothing is being written."},
        **error_responses(401, 404, 405, 429, 500, 503),
    },
}

ROUTES = (
    Routed(CHAT, "POST", chat, "consume", _TURN),
    Routed(f"{CHAT}/{{chat_id:conversation}}/stream", "GET", resume, operation=_RESUME),
)
