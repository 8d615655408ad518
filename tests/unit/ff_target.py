"""A functions-framework target for HTTP tests: the real ``ApiApp``, wired to fakes
by the test through ``current``."""

from __future__ import annotations

import functions_framework.aio
from spark_http.app import ApiApp
from starlette.requests import Request
from starlette.responses import Response

current: ApiApp | None = None


@functions_framework.aio.http
async def api(request: Request) -> Response:
    assert current is not None, "the test must set ff_target.current"
    return await current(request)
