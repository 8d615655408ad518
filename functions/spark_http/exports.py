"""The export routes (DESIGN §15): a person's data, and a parent's export of a
dependent's, as a zip streamed while it is made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from shared.schemas.openapi.parts import Operation, error_responses
from spark_http.edge import Edge, Routed
from spark_http.families import FAMILY, FAMILY_ID, MEMBER_ID
from spark_http.logs import LoggedStream


async def export_mine(edge: Edge, request: Request) -> Response:
    """``GET /api/spark/me/export``: the caller's data (one export per ten minutes)."""
    user = await edge.caller(request)
    return _zip(await edge.agent.export(user.uid), user.uid)


async def export_dependent(edge: Edge, request: Request) -> Response:
    """``GET .../families/{id}/members/{uid}/export``: a dependent's data, for a parent
    of their family (404 for anyone else, and for a member who is no dependent)."""
    user = await edge.caller(request)
    params = request.path_params
    member_id = params["member_id"]
    body = await edge.agent.export_dependent(user.uid, params["family_id"], member_id)
    return _zip(body, member_id)


def _zip(body: AsyncIterator[bytes], user_id: str) -> Response:
    # A user id is letters and digits (Firebase's), safe in a quoted header value.
    name = "".join(c for c in user_id if c.isascii() and c.isalnum())[:64]
    headers = {
        "Content-Disposition": f'attachment; filename="spark-data-{name}.zip"',
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    }
    return LoggedStream(body, status_code=200, media_type="application/zip", headers=headers)


_ZIP = {"application/zip": {"schema": {"type": "string", "format": "binary"}}}
_WHAT = (
    "conversations/{id}.json (every message, the archive merged in order) and "
    "conversations/{id}.md, lessons/{id}.json with their kept versions, tasks/{id}.json "
    "(task sections), settings.json, family.json (membership and names only), files/ "
    "(the uploads themselves) and README.txt, which says what is left out (other "
    "members' data) and why"
)


def _export(summary: str, parameters: list[dict[str, Any]]) -> Operation:
    """An export's operation: at most one per account per ten minutes (429 rate_limited
    with Retry-After and retryAfter), decided by the store across processes."""
    operation: Operation = {
        "summary": summary,
        "security": [{"bearer": []}],
        "responses": {
            "200": {"description": "The zip, streamed as it is made.", "content": _ZIP},
            **error_responses(401, 404, 405, 410, 429, 500, 503),
        },
    }
    if parameters:
        operation["parameters"] = parameters
    return operation


_MINE = _export(
    f"Everything of the caller's, as a zip: {_WHAT}. At most one export per "
    "account per ten minutes: 429 rate_limited with Retry-After. 410 "
    "account_deleted once the account's erasure has begun.",
    [],
)
_DEPENDENT = _export(
    "A dependent's data, as GET /api/spark/me/export gives their own, for a parent "
    "of their family. 404 for anyone else, and for a member who is no dependent "
    "(never 403); the ten minutes are counted on the dependent's account.",
    [FAMILY_ID, MEMBER_ID],
)

ROUTES = (
    Routed("/api/spark/me/export", "GET", export_mine, operation=_MINE),
    Routed(f"{FAMILY}/members/{{member_id}}/export", "GET", export_dependent, operation=_DEPENDENT),
)
