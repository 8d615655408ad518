"""The AI SDK's chat routes of the OpenAPI document (its ``DefaultChatTransport``)."""

from __future__ import annotations

from typing import Any

from shared.schemas.openapi.parts import COMMON_ERRORS, PREFIX, error_responses, json_body
from shared.schemas.uichat import ChatRequest

UI_STREAM = {
    "text/event-stream": {
        "schema": {"type": "string"},
        "description": "The AI SDK's UI message stream (header x-vercel-ai-ui-message-stream: "
        "v1): one `data: {json}` chunk a line (start, start-step, text-start/-delta/-end, "
        "tool-input-available, tool-output-available/-error, tool-approval-request, "
        "data-task, data-question, finish-step, finish, abort, error), then `data: [DONE]`.",
    }
}
CHAT_ID = {
    "name": "chatId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": r"^[A-Za-z0-9_-]{1,64}$"},
    "description": "The chat's id: its conversation's.",
}


def chat_paths() -> dict[str, Any]:
    send = {
        "post": {
            "summary": "A turn of an AI SDK chat: the newest user message (a new one, or the "
            "chat's conversation made with its id), or the approvals and client tools' "
            "outputs that answer calls waiting in the conversation; everything else in "
            "messages is ignored (the stored conversation is the history).",
            "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": json_body(ChatRequest)},
            "responses": {
                "200": {"description": "The reply, streamed.", "content": UI_STREAM},
                **error_responses(*COMMON_ERRORS),
            },
        }
    }
    resume = {
        "get": {
            "summary": "The chat's reply being written, from its start, then live, from any "
            "instance; 204 when none is.",
            "security": [{"bearer": []}],
            "parameters": [CHAT_ID],
            "responses": {
                "200": {"description": "The reply, streamed.", "content": UI_STREAM},
                "204": {"description": "Nothing is being written."},
                **error_responses(401, 404, 405, 429, 500, 503),
            },
        }
    }
    return {PREFIX + "/chat": send, PREFIX + "/chat/{chatId}/stream": resume}
