"""The AI SDK's chat routes, for front ends built on its ``useChat`` and
``DefaultChatTransport``: a turn posted as the transport posts it, its reply as the UI
message stream, and that stream resumed from any instance (``GET .../chat/{id}/stream``,
the transport's ``resume``). A stop is our own route's, for every listener."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from shared.agent.uistream import HEADERS
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


ROUTES = (
    Routed(CHAT, "POST", chat, app_check="consume"),
    Routed(f"{CHAT}/{{chat_id:conversation}}/stream", "GET", resume),
)
