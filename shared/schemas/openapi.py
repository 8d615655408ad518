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
    ErrorBody,
    FamilyResponse,
    InviteRequest,
    InviteResponse,
    InvitesResponse,
    JoinRequest,
    LessonVersionsResponse,
    RestoreRequest,
    RestoreResponse,
    ResumeResponse,
    RoleRequest,
    SendMessageRequest,
    StopResponse,
    ToolResultRequest,
    UploadRequest,
    UploadResponse,
)

OPENAPI_PATH = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"
PREFIX = "/api/spark/agent"
LESSONS = "/api/spark/lessons/{lessonId}"
_MODELS: tuple[type[BaseModel], ...] = (
    SendMessageRequest,
    AckResponse,
    UploadRequest,
    UploadResponse,
    StopResponse,
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
    FamilyResponse,
    InviteResponse,
    InvitesResponse,
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
        "Send a message: the reply streams (Accept: text/event-stream) or a task writes it.",
        SendMessageRequest,
        {
            "200": {"description": "The reply, streamed.", "content": _SSE},
            "202": {"description": "Accepted or queued.", "content": _json(AckResponse)},
        },
    )
    # An attachment outside the sender's uploads (403) or one that cannot be used (422).
    send["post"]["responses"].update(_errors(403, 422))
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
            "summary": "Cancel one of the caller's tasks before it starts: its slot frees, "
            'its section ends cancelled, its call gets the result "Cancelled by the user." '
            "and the agent follows up. 404 not_found for a task that is not the caller's; "
            "409 task_running once its tool has started (it cannot be stopped mid-step "
            "yet); 409 task_finished once it has ended.",
            "security": [{"bearer": []}],
            "parameters": [_id("taskId", r"^[A-Za-z0-9_-]{1,200}$")],
            "responses": {
                "200": {"description": "Cancelled.", "content": _json(CancelTaskResponse)},
                **_errors(401, 404, 405, 409, 500, 503),
            },
        }
    }
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
            conversation + "/answers": _resumed(
                "Answer an ask_user_question call.", AnswersRequest
            ),
            conversation + "/approvals": _resumed(
                "Approve or deny a call awaiting approval.", ApprovalRequest
            ),
            conversation + "/tool-results": _resumed(
                "The output of a client-executed tool.", ToolResultRequest
            ),
            PREFIX + "/tasks/{taskId}/cancel": cancel_task,
            LESSONS + "/versions": lesson_versions,
            LESSONS + "/restore": restore,
            **_family_paths(),
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
