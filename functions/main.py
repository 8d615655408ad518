"""Cloud Functions entry points (thin): ``api``.

Importing this module reads and checks the configuration, so a process configured
unsafely (for example the Auth emulator in production) refuses to start.
"""

from __future__ import annotations

import logging

import functions_framework.aio
from spark_http.app import ApiApp
from starlette.requests import Request
from starlette.responses import Response

from shared.config import Settings
from shared.wiring import build_service, build_verifier

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

settings = Settings.from_env()
_api = ApiApp(build_service(settings), build_verifier(settings))


@functions_framework.aio.http
async def api(request: Request) -> Response:
    """The public HTTP function: ``/api/spark/agent/...``."""
    return await _api(request)
