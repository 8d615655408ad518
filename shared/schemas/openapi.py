"""The OpenAPI 3.1 document of the ``api`` function, built from the request and response
models (``GET /api/spark/agent/openapi.json`` serves it; ``make schemas`` writes it to
``schemas/openapi.json``, which a test keeps current)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from shared.schemas.api import (
    CONVERSATION_ID_PATTERN,
    EVENT_ID_PATTERN,
    FAMILY_ID_PATTERN,
    LESSON_ID_PATTERN,
    AckResponse,
    AnswersRequest,
    ApprovalRequest,
    CancelTaskResponse,
    CreateFamilyRequest,
    DeliveredResponse,
    ErrorBody,
    FamilyResponse,
    InviteRequest,
    InviteResponse,
    InvitesResponse,
    JoinRequest,
    LessonVersionsResponse,
    ModelResponse,
    ProgressResponse,
    RestoreRequest,
    RestoreResponse,
    ResumeResponse,
    RoleRequest,
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

OPENAPI_PATH = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"
PREFIX = "/api/spark/agent"
LESSONS = "/api/spark/lessons/{lessonId}"
_MODELS: tuple[type[BaseModel], ...] = (
    SendMessageRequest,
    AckResponse,
    DeliveredResponse,
    ProgressResponse,
    UploadRequest,
    UploadResponse,
    StopResponse,
    CancelTaskResponse,
    AnswersRequest,
    ApprovalRequest,
    ToolResultRequest,
    ResumeResponse,
    LessonVersionsResponse,
    RestoreRequest,
    RestoreResponse,
    CreateFamilyRequest,
    JoinRequest,
    InviteRequest,
    RoleRequest,
    SettingsRequest,
    SettingsResponse,
    FamilyResponse,
    InviteResponse,
    InvitesResponse,
    VoiceSessionResponse,
    SpeechRequest,
    ModelResponse,
    ErrorBody,
)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(model)}}


def _errors(*statuses: int) -> dict[str, Any]:
    errors = {str(s): {"description": "An error.", "content": _json(ErrorBody)} for s in statuses}
    if "404" in errors:
        # A path the Functions Framework itself cannot route (a control character in a
        # path segment) never reaches the api: the framework answers with plain text.
        errors["404"]["content"] = {
            **_json(ErrorBody),
            "text/plain": {"schema": {"type": "string"}},
        }
    return errors


_SSE = {
    "text/event-stream": {
        "schema": {
            "type": "string",
            "description": "Server-Sent Events: transcript (a voice message's words, "
            "before its run), run_start, text, tool_start, tool_end, task_queued, question, "
            "approval_required, then done or error (DESIGN §4).",
        }
    }
}
_CONVERSATION = {
    "name": "conversationId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": CONVERSATION_ID_PATTERN},
}
_LESSON = {
    "name": "lessonId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": LESSON_ID_PATTERN},
}
_EVENT_ID = {
    "type": "string",
    "pattern": EVENT_ID_PATTERN,
    "description": "An event id this API sent: {runId}:{parts}:{chars} or {runId}:end.",
}
_COMMON_ERRORS = (400, 401, 404, 405, 409, 413, 415, 429, 500, 502, 503, 504, 507)


def _post(summary: str, body: type[BaseModel], ok: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": _json(body)},
            "responses": {**ok, **_errors(*_COMMON_ERRORS)},
        }
    }


def _resumed(summary: str, body: type[BaseModel]) -> dict[str, Any]:
    ok = {
        "200": {"description": "The agent's follow-up, streamed.", "content": _SSE},
        "202": {"description": "Recorded; see status.", "content": _json(ResumeResponse)},
    }
    operation = _post(summary, body, ok)
    operation["post"]["parameters"] = [_CONVERSATION]
    return operation


FAMILIES = "/api/spark/families"
_FAMILY_ERRORS = (400, 401, 403, 404, 405, 409, 410, 413, 415, 429, 500, 503)


def _id(name: str, pattern: str = FAMILY_ID_PATTERN) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": pattern},
    }


def _operation(
    summary: str,
    ok: tuple[int, str, type[BaseModel] | None],
    body: type[BaseModel] | None = None,
    parameters: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    status, description, answer = ok
    response: dict[str, Any] = {"description": description}
    if answer is not None:
        response["content"] = _json(answer)
    operation: dict[str, Any] = {
        "summary": summary,
        "security": [{"bearer": []}],
        "responses": {str(status): response, **_errors(*_FAMILY_ERRORS)},
    }
    if body is not None:
        operation["requestBody"] = {"required": True, "content": _json(body)}
    if parameters:
        operation["parameters"] = list(parameters)
    return operation


def _family_paths() -> dict[str, Any]:
    """DESIGN §8, the membership half: errors are 403 ``parent_only``, 404
    (``no_family``, ``family_not_found`` for a family that is not the caller's: never
    403, ``member_not_found``, ``invite_not_found``), 409 (``already_in_family``,
    ``family_full``, ``last_parent``, ``too_many_invites``), 410 (``invite_expired``,
    ``invite_used_up``, ``invite_revoked``) and 429 with Retry-After."""
    family = _id("familyId")
    member = _id("userId", r"^[^/]{1,128}$")
    invite = _id("inviteId")
    changed = (200, "The family after the change.", FamilyResponse)
    return {
        FAMILIES: {
            "post": _operation(
                "Create a family; the caller becomes its parent (one family per user).",
                (201, "Created.", FamilyResponse),
                CreateFamilyRequest,
            )
        },
        FAMILIES + "/current": {
            "get": _operation(
                "The caller's family (404 no_family).", (200, "The family.", FamilyResponse)
            )
        },
        FAMILIES + "/join": {
            "post": _operation(
                "Join the family of an invite link, with the invite's role.",
                (200, "Joined (or already a member).", FamilyResponse),
                JoinRequest,
            )
        },
        FAMILIES + "/{familyId}/invites": {
            "post": _operation(
                "A new invite link (parents only). Its token is shown only in this answer.",
                (201, "Created.", InviteResponse),
                InviteRequest,
                (family,),
            ),
            "get": _operation(
                "The family's invites, newest first, without their tokens (parents only).",
                (200, "The invites.", InvitesResponse),
                parameters=(family,),
            ),
        },
        FAMILIES + "/{familyId}/invites/{inviteId}": {
            "delete": _operation(
                "Revoke an invite: its link stops working at once (parents only).",
                (204, "Revoked.", None),
                parameters=(family, invite),
            )
        },
        FAMILIES + "/{familyId}/progress": {
            "get": _operation(
                "Each member's lessons (title, updatedAt, blanks, answered), counted on the "
                "server (members only; any other family is 404 family_not_found).",
                (200, "The progress.", ProgressResponse),
                parameters=(family,),
            )
        },
        FAMILIES + "/{familyId}/members/{userId}": {
            "patch": _operation(
                "Change a member's role (parents only; 409 last_parent).",
                changed,
                RoleRequest,
                (family, member),
            ),
            "delete": _operation(
                "Leave the family (userId is the caller) or remove a member (parents only); "
                "the last member leaving ends the family.",
                (204, "Gone from the family.", None),
                parameters=(family, member),
            ),
        },
    }


def openapi() -> dict[str, Any]:
    """The document (deterministic: the same code gives the same bytes)."""
    schemas: dict[str, Any] = {}
    for model in _MODELS:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    send = _post(
        "Send a message: the reply streams (Accept: text/event-stream) or a task writes it. "
        "With targetUserId, targetFamily or the conversationId of a direct or family "
        "conversation, the text goes verbatim to family members (no model call): 201; "
        "past the sender's SPARK_FAMILY_MESSAGES_PER_MINUTE or "
        "SPARK_FAMILY_MESSAGE_BYTES_PER_HOUR, 429 with Retry-After, nothing delivered.",
        SendMessageRequest,
        {
            "200": {"description": "The reply, streamed.", "content": _SSE},
            "201": {
                "description": "Delivered verbatim to family members (or, for a retry "
                "with the same Idempotency-Key, the first answer: Idempotent-Replayed).",
                "content": _json(DeliveredResponse),
            },
            "202": {"description": "Accepted or queued.", "content": _json(AckResponse)},
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
    send["post"]["responses"].update(_errors(403, 422))
    files = {
        "get": {
            "summary": "A file that a message in the caller's copy of the conversation "
            "carries (a family member's attachment included): its bytes. 404 if no "
            "message there names the path.",
            "security": [{"bearer": []}],
            "parameters": [
                _CONVERSATION,
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
                **_errors(400, 401, 404, 405, 500, 503),
            },
        }
    }
    upload = {
        "post": {
            "summary": "Start an upload session for one file (JPEG, PNG or PDF, at most "
            "25 MB) under the caller's {uid}/uploads/; PUT the bytes to uploadUrl, then "
            "attach storagePath to a message.",
            "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": _json(UploadRequest)},
            "responses": {
                "201": {"description": "Session started.", "content": _json(UploadResponse)},
                **_errors(400, 401, 405, 413, 415, 429, 500, 503),
            },
        }
    }
    stop = {
        "post": {
            "summary": "Stop the conversation's active run wherever it runs.",
            "security": [{"bearer": []}],
            "parameters": [_CONVERSATION],
            "responses": {
                "200": {"description": "Stopped.", "content": _json(StopResponse)},
                "202": {"description": "Stopping.", "content": _json(StopResponse)},
                **_errors(*_COMMON_ERRORS),
            },
        }
    }
    stream = {
        "get": {
            "summary": "Resume a run's stream from Last-Event-ID (header or lastEventId).",
            "security": [{"bearer": []}],
            "parameters": [
                _CONVERSATION,
                {"name": "Last-Event-ID", "in": "header", "schema": _EVENT_ID},
                {"name": "lastEventId", "in": "query", "schema": _EVENT_ID},
            ],
            "responses": {
                "200": {"description": "The events missed, then the rest.", "content": _SSE},
                "204": {"description": "Nothing to send."},
                **_errors(*_COMMON_ERRORS),
            },
        }
    }
    lesson_versions = {
        "get": {
            "summary": "A lesson's kept earlier versions, newest first (also a deleted lesson's).",
            "security": [{"bearer": []}],
            "parameters": [_LESSON],
            "responses": {
                "200": {"description": "The versions.", "content": _json(LessonVersionsResponse)},
                **_errors(400, 401, 404, 405, 500, 503),
            },
        }
    }
    restore = _post(
        "Restore a kept version: it becomes the lesson's next version (the one it replaces "
        "is kept); a deleted lesson comes back. 409 if the lesson changed meanwhile.",
        RestoreRequest,
        {"200": {"description": "Restored.", "content": _json(RestoreResponse)}},
    )
    restore["post"]["parameters"] = [_LESSON]
    cancel_task = {
        "post": {
            "summary": "Cancel one of the caller's tasks. One not yet started, or waiting "
            "for an answer, ends at once (200 cancelled); one whose tool is running stops "
            "at its next step (202 cancelling). Either way its slot frees, its section "
            'ends cancelled, its call gets the result "Cancelled by the user." and the '
            "agent follows up. 404 not_found for a task that is not the caller's; 409 "
            "task_finished once it has ended.",
            "security": [{"bearer": []}],
            "parameters": [_id("taskId", r"^[A-Za-z0-9_-]{1,200}$")],
            "responses": {
                "200": {"description": "Cancelled.", "content": _json(CancelTaskResponse)},
                "202": {
                    "description": "Its running tool stops at its next step.",
                    "content": _json(CancelTaskResponse),
                },
                **_errors(401, 404, 405, 409, 500, 503),
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
                "201": {"description": "Minted.", "content": _json(VoiceSessionResponse)},
                **_errors(401, 405, 409, 429, 500, 502, 503),
            },
        }
    }
    speech = _post(
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
    speech["post"]["parameters"] = [_CONVERSATION]
    speech["post"]["responses"].update(_errors(502))
    conversation = PREFIX + "/conversations/{conversationId}"
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Spark AI Agent API",
            "version": "1",
            "description": "The api function of Spark AI Agent. Errors are "
            '{"error": {"code", "message", "requestId", "details"?}}: the message in plain '
            "words, and for a body that did not validate (400) each problem in details.",
        },
        "paths": {
            PREFIX + "/messages": send,
            PREFIX + "/uploads": upload,
            conversation + "/stream": stream,
            conversation + "/stop": stop,
            conversation + "/files": files,
            conversation + "/answers": _resumed(
                "Answer an ask_user_question call.", AnswersRequest
            ),
            conversation + "/approvals": _resumed(
                "Approve or deny a call awaiting approval.", ApprovalRequest
            ),
            conversation + "/tool-results": _resumed(
                "The output of a client-executed tool.", ToolResultRequest
            ),
            conversation + "/speech": speech,
            PREFIX + "/voice/sessions": voice_session,
            PREFIX + "/tasks/{taskId}/cancel": cancel_task,
            LESSONS + "/versions": lesson_versions,
            LESSONS + "/restore": restore,
            **_family_paths(),
            "/api/spark/me/settings": {
                "patch": _operation(
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
                        "200": {"description": "The model.", "content": _json(ModelResponse)},
                        **_errors(401, 405, 500, 503),
                    },
                }
            },
            PREFIX + "/openapi.json": {
                "get": {
                    "summary": "This document.",
                    "responses": {"200": {"description": "OpenAPI 3.1."}},
                }
            },
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "Firebase ID token",
                }
            },
        },
    }


def render() -> str:
    return json.dumps(openapi(), indent=2, sort_keys=True) + "\n"
