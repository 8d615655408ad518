"""The OpenAPI 3.1 document of the ``api`` function, built from the request and response
models (``GET /api/spark/agent/openapi.json`` serves it; ``make schemas`` writes it to
``schemas/openapi.json``, which a test keeps current)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from shared.schemas.api import (
    AckResponse,
    AnswersRequest,
    ApprovalRequest,
    CancelTaskResponse,
    ControlsRequest,
    ControlsResponse,
    CreateFamilyRequest,
    DeletionResponse,
    DeliveredResponse,
    EraseAccountRequest,
    ErrorBody,
    FamilyResponse,
    FeedbackRequest,
    FeedbackResponse,
    InviteRequest,
    InviteResponse,
    InvitesResponse,
    JoinRequest,
    LessonVersionsResponse,
    ModelResponse,
    NameRequest,
    ProgressResponse,
    RegenerateRequest,
    RenameRequest,
    RenameResponse,
    RestoreRequest,
    RestoreResponse,
    ResumeResponse,
    RoleRequest,
    SafetyResponse,
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
from shared.schemas.openapi.agent import agent_paths
from shared.schemas.openapi.chat import chat_paths
from shared.schemas.openapi.exports import export_paths
from shared.schemas.openapi.families import family_paths
from shared.schemas.openapi.manage import manage_paths
from shared.schemas.uichat import ChatRequest

OPENAPI_PATH = Path(__file__).resolve().parents[3] / "schemas" / "openapi.json"

_MODELS: tuple[type[BaseModel], ...] = (
    SendMessageRequest,
    AckResponse,
    DeliveredResponse,
    ProgressResponse,
    SafetyResponse,
    ControlsRequest,
    ControlsResponse,
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
    NameRequest,
    SettingsRequest,
    SettingsResponse,
    EraseAccountRequest,
    DeletionResponse,
    FamilyResponse,
    InviteResponse,
    InvitesResponse,
    VoiceSessionResponse,
    SpeechRequest,
    ModelResponse,
    ChatRequest,
    RenameRequest,
    RenameResponse,
    RegenerateRequest,
    FeedbackRequest,
    FeedbackResponse,
    ErrorBody,
)


def openapi() -> dict[str, Any]:
    """The document (deterministic: the same code gives the same bytes)."""
    schemas: dict[str, Any] = {}
    for model in _MODELS:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Spark AI Agent API",
            "version": "1",
            "description": "The api function of Spark AI Agent. Errors are "
            '{"error": {"code", "message", "requestId", "details"?, "retryAfter"?}}: the '
            "message in plain words, for a body that did not validate (400) each problem "
            "in details, and for a 429 the seconds to wait (as Retry-After says).",
        },
        "paths": {
            **agent_paths(),
            **manage_paths(),
            **chat_paths(),
            **family_paths(),
            **export_paths(),
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
