"""The routes by which a person manages a conversation (DESIGN §15): a title given, the
conversation deleted, the last reply made again, and a reply rated."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.schemas.api import (
    MESSAGE_ID_PATTERN,
    AckResponse,
    ConversationInfo,
    FeedbackInfo,
    FeedbackRequest,
    FeedbackResponse,
    RegenerateRequest,
    RenameRequest,
    RenameResponse,
)
from shared.schemas.openapi.parts import CONVERSATION as CONVERSATION_ID
from shared.schemas.openapi.parts import (
    SSE,
    Operation,
    error_responses,
    json_body,
    operation,
    path_id,
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


_ERRORS = (400, 401, 404, 405, 413, 415, 500, 503)
_RENAME = operation(
    "Give the conversation a title (1 to 120 characters, not all spaces). A "
    "title given here is never replaced by the one made after the first reply. 404 "
    "for a conversation that is not the caller's; 400 for an empty or long title "
    "(nothing changes).",
    (200, "Renamed.", RenameResponse),
    RenameRequest,
    (CONVERSATION_ID,),
    _ERRORS,
)
_DELETE = operation(
    "Delete the caller's copy of the conversation: its run stopped, its "
    "tasks cancelled, the document, its archive, task sections, files and spoken "
    "replies gone; nothing in flight makes any of it again. A direct or family "
    "conversation loses only the caller's copy. 204, and 204 again.",
    (204, "Deleted (or there was nothing to delete).", None),
    parameters=(CONVERSATION_ID,),
    errors=(401, 404, 405, 500, 503),
)
_REGENERATE: Operation = {
    "summary": "Make the conversation's last reply again, as a send: a new reply to the "
    "same user message, streamed (Accept: text/event-stream) or written by a task "
    "(202), within the same limits, budget and App Check as a message. It is appended "
    "with regenerates: messageId; the old reply stays (clients show the newest of a "
    "chain) and the model is not shown it. 400 for any message but the last finished "
    "reply, or with an Idempotency-Key (as a message to the agent); 409 while a reply "
    "is being written; 404 for a conversation that is not the caller's. A refusal "
    "changes nothing.",
    "security": [{"bearer": []}],
    "parameters": [CONVERSATION_ID],
    "requestBody": {"required": True, "content": json_body(RegenerateRequest)},
    "responses": {
        "200": {"description": "The new reply, streamed.", "content": SSE},
        "202": {
            "description": "Accepted: a task writes it.",
            "content": json_body(AckResponse),
        },
        **error_responses(*_ERRORS, 409, 429),
    },
}
_FEEDBACK = operation(
    "Rate one of Spark AI Agent's replies (up or down, with a comment if "
    "wished): kept for quality review and shown to its author as the message's "
    "feedback; the latest rating replaces the one before. 400 for a message that is "
    "not a reply; 404 for one not in the caller's conversation.",
    (200, "Kept.", FeedbackResponse),
    FeedbackRequest,
    (CONVERSATION_ID, path_id("messageId", MESSAGE_ID_PATTERN)),
    _ERRORS,
)

ROUTES = (
    Routed(CONVERSATION, "PATCH", rename, operation=_RENAME),
    Routed(CONVERSATION, "DELETE", delete, operation=_DELETE),
    Routed(f"{CONVERSATION}/regenerate", "POST", regenerate, "consume", _REGENERATE),
    Routed(f"{MESSAGE}/feedback", "PUT", feedback, operation=_FEEDBACK),
)
