"""The export routes (DESIGN §15): a person's data, and a parent's export of a
dependent's, as a zip streamed while it is made."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from spark_http.edge import Edge, Routed
from spark_http.families import FAMILY
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


ROUTES = (
    Routed("/api/spark/me/export", "GET", export_mine),
    Routed(f"{FAMILY}/members/{{member_id}}/export", "GET", export_dependent),
)
