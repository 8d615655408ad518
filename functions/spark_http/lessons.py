"""The routes of a lesson: its kept versions, and one of them restored."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shared.schemas.api import (
    KeptVersionInfo,
    LessonVersionsResponse,
    RestoreRequest,
    RestoreResponse,
)
from shared.schemas.openapi.parts import LESSON as LESSON_ID
from shared.schemas.openapi.parts import Operation, json_body, operation, post
from spark_http.edge import Edge, Routed

LESSON = "/api/spark/lessons/{lesson_id:lesson}"


async def lesson_versions(edge: Edge, request: Request) -> Response:
    """``GET /api/spark/lessons/{id}/versions``: the lesson's kept versions."""
    user = await edge.caller(request)
    lesson_id = request.path_params["lesson_id"]
    found = await edge.agent.lesson_versions(user.uid, lesson_id)
    answer = LessonVersionsResponse(
        lesson_id=lesson_id,
        current_version=found.current.version if found.current else None,
        versions=[
            KeptVersionInfo(
                version=k.version, title=k.title, saved_at=k.saved_at, characters=k.characters
            )
            for k in found.kept
        ],
    )
    return JSONResponse(answer.model_dump(by_alias=True, mode="json"))


async def restore_lesson(edge: Edge, request: Request) -> Response:
    """``POST /api/spark/lessons/{id}/restore``: a kept version becomes the lesson's
    next one (the version it replaces is kept)."""
    user, body = await edge.read(request, RestoreRequest)
    lesson_id = request.path_params["lesson_id"]
    restored = await edge.agent.restore_lesson(user.uid, lesson_id, body.version)
    answer = RestoreResponse(
        lesson_id=lesson_id, version=restored.version, restored_from=body.version
    )
    return JSONResponse(answer.model_dump(by_alias=True))


_VERSIONS = operation(
    "A lesson's kept earlier versions, newest first (also a deleted lesson's).",
    (200, "The versions.", LessonVersionsResponse),
    parameters=(LESSON_ID,),
    errors=(400, 401, 404, 405, 500, 503),
)


def _restore() -> Operation:
    restore = post(
        "Restore a kept version: it becomes the lesson's next version (the one it replaces "
        "is kept); a deleted lesson comes back. 409 if the lesson changed meanwhile.",
        RestoreRequest,
        {"200": {"description": "Restored.", "content": json_body(RestoreResponse)}},
    )
    restore["parameters"] = [LESSON_ID]
    return restore


ROUTES = (
    Routed(f"{LESSON}/versions", "GET", lesson_versions, operation=_VERSIONS),
    Routed(f"{LESSON}/restore", "POST", restore_lesson, operation=_restore()),
)
