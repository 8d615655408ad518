"""The routes by which a person manages a conversation (DESIGN §15) in the OpenAPI
document: a title, a delete, the last reply made again and feedback on a reply."""

from __future__ import annotations

from typing import Any

from shared.schemas.api import (
    MESSAGE_ID_PATTERN,
    AckResponse,
    FeedbackRequest,
    FeedbackResponse,
    RegenerateRequest,
    RenameRequest,
    RenameResponse,
)
from shared.schemas.openapi.parts import (
    CONVERSATION,
    PREFIX,
    SSE,
    error_responses,
    json_body,
    path_id,
)

_ERRORS = (400, 401, 404, 405, 413, 415, 500, 503)


def manage_paths() -> dict[str, Any]:
    """The conversation's own path (PATCH, DELETE), its last reply made again, and a
    reply's feedback."""
    conversation = PREFIX + "/conversations/{conversationId}"
    rename = {
        "summary": "Give the conversation a title (1 to 120 characters, not all spaces). A "
        "title given here is never replaced by the one made after the first reply. 404 "
        "for a conversation that is not the caller's; 400 for an empty or long title "
        "(nothing changes).",
        "security": [{"bearer": []}],
        "parameters": [CONVERSATION],
        "requestBody": {"required": True, "content": json_body(RenameRequest)},
        "responses": {
            "200": {"description": "Renamed.", "content": json_body(RenameResponse)},
            **error_responses(*_ERRORS),
        },
    }
    delete = {
        "summary": "Delete the caller's copy of the conversation: its run stopped, its "
        "tasks cancelled, the document, its archive, task sections, files and spoken "
        "replies gone; nothing in flight makes any of it again. A direct or family "
        "conversation loses only the caller's copy. 204, and 204 again.",
        "security": [{"bearer": []}],
        "parameters": [CONVERSATION],
        "responses": {
            "204": {"description": "Deleted (or there was nothing to delete)."},
            **error_responses(401, 404, 405, 500, 503),
        },
    }
    regenerate = {
        "summary": "Make the conversation's last reply again, as a send: a new reply to the "
        "same user message, streamed (Accept: text/event-stream) or written by a task "
        "(202), within the same limits, budget and App Check as a message. It is appended "
        "with regenerates: messageId; the old reply stays (clients show the newest of a "
        "chain) and the model is not shown it. 400 for any message but the last finished "
        "reply, or with an Idempotency-Key (as a message to the agent); 409 while a reply "
        "is being written; 404 for a conversation that is not the caller's. A refusal "
        "changes nothing.",
        "security": [{"bearer": []}],
        "parameters": [CONVERSATION],
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
    feedback = {
        "summary": "Rate one of Spark AI Agent's replies (up or down, with a comment if "
        "wished): kept for quality review and shown to its author as the message's "
        "feedback; the latest rating replaces the one before. 400 for a message that is "
        "not a reply; 404 for one not in the caller's conversation.",
        "security": [{"bearer": []}],
        "parameters": [CONVERSATION, path_id("messageId", MESSAGE_ID_PATTERN)],
        "requestBody": {"required": True, "content": json_body(FeedbackRequest)},
        "responses": {
            "200": {"description": "Kept.", "content": json_body(FeedbackResponse)},
            **error_responses(*_ERRORS),
        },
    }
    return {
        conversation: {"patch": rename, "delete": delete},
        conversation + "/regenerate": {"post": regenerate},
        conversation + "/messages/{messageId}/feedback": {"put": feedback},
    }
