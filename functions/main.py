"""Cloud Functions entry points (thin): ``api`` (public) and ``tasks`` (Cloud Tasks only).

Importing this module reads and checks the configuration, so a process configured
unsafely (for example the Auth emulator in production) refuses to start.
"""

from __future__ import annotations

import functions_framework.aio
from spark_http import logs
from spark_http.app import ApiApp
from spark_http.tasks import TasksApp
from starlette.requests import Request
from starlette.responses import Response

from shared.config import Settings
from shared.wiring import build_components, build_task_verifier, build_verifier

settings = Settings.from_env()
logs.configure(settings.project_id)
_components, _stores = build_components(settings)
_api = ApiApp(_components.agent, build_verifier(settings), settings)
_tasks = TasksApp(_components.handler, build_task_verifier(settings))


@functions_framework.aio.http
async def api(request: Request) -> Response:
    """The public HTTP function: ``/api/spark/agent/...``."""
    return await _api(request)


@functions_framework.aio.http
async def tasks(request: Request) -> Response:
    """The private HTTP function Cloud Tasks calls: runs task tools, replies, watchdogs."""
    return await _tasks(request)
