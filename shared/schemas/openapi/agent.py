"""The conversation, lesson and account routes of the OpenAPI document (DESIGN §4)."""

from __future__ import annotations

from typing import Any

from shared.schemas.api import (
    AckResponse,
    AnswersRequest,
    ApprovalRequest,
    CancelTaskResponse,
    DeliveredResponse,
    LessonVersionsResponse,
    ModelResponse,
    RestoreRequest,
    RestoreResponse,
    SendMessageRequest,
    SettingsRequest,
    SettingsResponse,
    SpeechRequest,
    StopResponse,
    ToolResultRequest,
    UploadRequest,
    UploadResponse,
    VoiceSessionResponse,
)
from shared.schemas.openapi.parts import (
    COMMON_ERRORS,
    CONVERSATION,
    EVENT_ID,
    LESSON,
    LESSONS,
    PREFIX,
    SSE,
    error_responses,
    json_body,
    operation,
    path_id,
    post,
    resumed,
)


def agent_paths() -> dict[str, Any]:
    """Every route but the families' (``families.family_paths``)."""
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
    send["post"]["parameters"] = [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "description": "(Messages to family members) a retry with the same key, by "
            "the same sender within 24 hours, gets the first answer and delivers nothing "
            "again; the same key for a different message is 422 idempotency_key_reused. "
            "On a message to the agent it is 400 (only deliveries keep receipts).",
            "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"},
        }
    ]
    # An attachment outside the sender's uploads (403) or one that cannot be used (422).
    send["post"]["responses"].update(error_responses(403, 422))
    files = {
        "get": {
            "summary": "A file that a message in the caller's copy of the conversation "
            "carries (a family member's attachment included): its bytes. 404 if no "
            "message there names the path.",
            "security": [{"bearer": []}],
            "parameters": [
                CONVERSATION,
                {
                    "name": "path",
                    "in": "query",
                    "required": True,
                    "schema": {"type": "string", "minLength": 1},
                    "description": "The storagePath (or textPath) of a message's file.",
                },
            ],
            "responses": {
                "200": {
                    "description": "The file.",
                    "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
                },
                **error_responses(400, 401, 404, 405, 500, 503),
            },
        }
    }
    upload = {
        "post": {
            "summary": "Start an upload session for one file (JPEG, PNG or PDF, at most "
            "25 MB) under the caller's {uid}/uploads/; PUT the bytes to uploadUrl, then "
            "attach storagePath to a message.",
            "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": json_body(UploadRequest)},
            "responses": {
                "201": {"description": "Session started.", "content": json_body(UploadResponse)},
                **error_responses(400, 401, 405, 413, 415, 429, 500, 503),
            },
        }
    }
    stop = {
        "post": {
            "summary": "Stop the conversation's active run wherever it runs.",
            "security": [{"bearer": []}],
            "parameters": [CONVERSATION],
            "responses": {
                "200": {"description": "Stopped.", "content": json_body(StopResponse)},
                "202": {"description": "Stopping.", "content": json_body(StopResponse)},
                **error_responses(*COMMON_ERRORS),
            },
        }
    }
    stream = {
        "get": {
            "summary": "Resume a run's stream from Last-Event-ID (header or lastEventId).",
            "security": [{"bearer": []}],
            "parameters": [
                CONVERSATION,
                {"name": "Last-Event-ID", "in": "header", "schema": EVENT_ID},
                {"name": "lastEventId", "in": "query", "schema": EVENT_ID},
            ],
            "responses": {
                "200": {"description": "The events missed, then the rest.", "content": SSE},
                "204": {"description": "Nothing to send."},
                **error_responses(*COMMON_ERRORS),
            },
        }
    }
    lesson_versions = {
        "get": {
            "summary": "A lesson's kept earlier versions, newest first (also a deleted lesson's).",
            "security": [{"bearer": []}],
            "parameters": [LESSON],
            "responses": {
                "200": {
                    "description": "The versions.",
                    "content": json_body(LessonVersionsResponse),
                },
                **error_responses(400, 401, 404, 405, 500, 503),
            },
        }
    }
    restore = post(
        "Restore a kept version: it becomes the lesson's next version (the one it replaces "
        "is kept); a deleted lesson comes back. 409 if the lesson changed meanwhile.",
        RestoreRequest,
        {"200": {"description": "Restored.", "content": json_body(RestoreResponse)}},
    )
    restore["post"]["parameters"] = [LESSON]
    cancel_task = {
        "post": {
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
    }
    voice_session = {
        "post": {
            "summary": "Start a live-audio session: a short-lived, single-use provider "
            "secret the browser connects to the provider with (it never sees an API key). "
            "Within SPARK_VOICE_SESSIONS_PER_DAY a day (429 past it, nothing minted); 409 "
            "voice_unavailable without an audio provider (offline).",
            "security": [{"bearer": []}],
            "responses": {
                "201": {"description": "Minted.", "content": json_body(VoiceSessionResponse)},
                **error_responses(401, 405, 409, 429, 500, 502, 503),
            },
        }
    }
    speech = post(
        "Read a reply of Spark AI Agent's aloud: its text, each visual part's description "
        "in its place, streamed as audio (audio/mpeg or audio/wav) and kept, so a replay "
        "costs no provider call. 404 for a message not in the caller's conversation, 400 "
        "for one that is not a reply; 409 voice_unavailable offline.",
        SpeechRequest,
        {
            "200": {
                "description": "The audio, streamed.",
                "content": {
                    "audio/mpeg": {"schema": {"type": "string", "format": "binary"}},
                    "audio/wav": {"schema": {"type": "string", "format": "binary"}},
                },
            }
        },
    )
    speech["post"]["parameters"] = [CONVERSATION]
    speech["post"]["responses"].update(error_responses(502))
    conversation = PREFIX + "/conversations/{conversationId}"
    return {
        PREFIX + "/messages": send,
        PREFIX + "/uploads": upload,
        conversation + "/stream": stream,
        conversation + "/stop": stop,
        conversation + "/files": files,
        conversation + "/answers": resumed("Answer an ask_user_question call.", AnswersRequest),
        conversation + "/approvals": resumed(
            "Approve or deny a call awaiting approval.", ApprovalRequest
        ),
        conversation + "/tool-results": resumed(
            "The output of a client-executed tool.", ToolResultRequest
        ),
        conversation + "/speech": speech,
        PREFIX + "/voice/sessions": voice_session,
        PREFIX + "/tasks/{taskId}/cancel": cancel_task,
        LESSONS + "/versions": lesson_versions,
        LESSONS + "/restore": restore,
        "/api/spark/me/settings": {
            "patch": operation(
                "Change the caller's settings. aiReadsFamilyMessages false: no family "
                "message they wrote is given to any model, and their own agent reads no "
                "family messages, from the next model call on. Also written to the "
                "caller's mirror /{uid}/client/settings/current.",
                (200, "The settings after the change.", SettingsResponse),
                SettingsRequest,
            )
        },
        PREFIX + "/model": {
            "get": {
                "summary": "Which model answers. With no provider configured it is the "
                "demo model (demo true), and examples lists the requests it recognises "
                "(docs/demo.md), for a client to offer in an empty conversation.",
                "security": [{"bearer": []}],
                "responses": {
                    "200": {"description": "The model.", "content": json_body(ModelResponse)},
                    **error_responses(401, 405, 500, 503),
                },
            }
        },
        PREFIX + "/openapi.json": {
            "get": {
                "summary": "This document.",
                "responses": {"200": {"description": "OpenAPI 3.1."}},
            }
        },
    }
