"""The export routes of the OpenAPI document (DESIGN §15)."""

from __future__ import annotations

from typing import Any

from shared.schemas.openapi.families import FAMILIES
from shared.schemas.openapi.parts import error_responses, path_id

ZIP = {"application/zip": {"schema": {"type": "string", "format": "binary"}}}
_WHAT = (
    "conversations/{id}.json (every message, the archive merged in order) and "
    "conversations/{id}.md, lessons/{id}.json with their kept versions, tasks/{id}.json "
    "(task sections), settings.json, family.json (membership and names only), files/ "
    "(the uploads themselves) and README.txt, which says what is left out (other "
    "members' data) and why"
)


def _export(summary: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "security": [{"bearer": []}],
        "responses": {
            "200": {"description": "The zip, streamed as it is made.", "content": ZIP},
            **error_responses(401, 404, 405, 410, 429, 500, 503),
        },
    }
    if parameters:
        operation["parameters"] = parameters
    return {"get": operation}


def export_paths() -> dict[str, Any]:
    """A person's export, and a parent's of a dependent's: at most one per account per
    ten minutes (429 rate_limited with Retry-After and retryAfter), decided by the
    store across processes."""
    return {
        "/api/spark/me/export": _export(
            f"Everything of the caller's, as a zip: {_WHAT}. At most one export per "
            "account per ten minutes: 429 rate_limited with Retry-After. 410 "
            "account_deleted once the account's erasure has begun.",
            [],
        ),
        FAMILIES + "/{familyId}/members/{userId}/export": _export(
            "A dependent's data, as GET /api/spark/me/export gives their own, for a parent "
            "of their family. 404 for anyone else, and for a member who is no dependent "
            "(never 403); the ten minutes are counted on the dependent's account.",
            [path_id("familyId"), path_id("userId", r"^[^/]{1,128}$")],
        ),
    }
