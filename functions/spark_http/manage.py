"""The routes by which a person manages a conversation (DESIGN §15): a title given, the
conversation deleted, the last reply made again, and a reply rated."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.schemas.api import (
    AckResponse,
    ConversationInfo,
    FeedbackInfo,
    FeedbackRequest,
    FeedbackResponse,
    RegenerateRequest,
    RenameRequest,
    RenameResponse,
)
from spark_http.conversations import CONVERSATION, refuse_idempotency
from spark_http.edge import Edge, Routed, in_background
from spark_http.responses import sse_response

MESSAGE = CONVERSATION + "/messages/{message_id:message}"


async def rename(edge: Edge, request: Request) -> Response:
    """``PATCH .../conversations/{id}`` ``{title}``: 200 with the conversation's title."""
    user, body = await edge.read(request, RenameRequest)
    conversation = await edge.agent.rename(
        user.uid, request.path_params["conversation_id"], body.title
    )
    info = ConversationInfo(
        id=conversation.id, title=conversation.title, title_source=conversation.title_source
    )
    return JSONResponse(RenameResponse(conversation=info).model_dump(by_alias=True))


async def delete(edge: Edge, request: Request) -> Response:
    """``DELETE .../conversations/{id}``: 204, and 204 again (one not there is gone)."""
    user = await edge.caller(request)
    await edge.agent.delete_conversation(user.uid, request.path_params["conversation_id"])
    return Response(status_code=204)


async def regenerate(edge: Edge, request: Request) -> Response:
    """``POST .../conversations/{id}/regenerate`` ``{messageId}``: the last reply made
    again, as a send: streamed (``Accept: text/event-stream``), or 202 and a task."""
    user, body = await edge.read(request, RegenerateRequest)
    refuse_idempotency(request)
    sent = await edge.agent.regenerate(
        user,
        request.path_params["conversation_id"],
        body.message_id,
        background=in_background(request),
    )
    if sent.body is not None:
        return sse_response(sent.body)
    ack = AckResponse(conversation_id=sent.conversation_id, message_id=sent.user_message_id)
    return JSONResponse(ack.model_dump(by_alias=True), status_code=202)


async def feedback(edge: Edge, request: Request) -> Response:
    """``PUT .../messages/{messageId}/feedback`` ``{rating, comment?}``: 200."""
    user, body = await edge.read(request, FeedbackRequest)
    rated = await edge.agent.rate(
        user.uid,
        request.path_params["conversation_id"],
        request.path_params["message_id"],
        body.rating,
        body.comment,
    )
    kept = rated.feedback
    answer = FeedbackResponse(
        conversation_id=rated.conversation_id,
        message_id=rated.message.id,
        feedback=FeedbackInfo(rating=kept.rating, comment=kept.comment, at=kept.at),
    )
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"))


ROUTES = (
    Routed(CONVERSATION, "PATCH", rename),
    Routed(CONVERSATION, "DELETE", delete),
    Routed(f"{CONVERSATION}/regenerate", "POST", regenerate, app_check="consume"),
    Routed(f"{MESSAGE}/feedback", "PUT", feedback),
)
