"""Cloud Functions entry points (thin): ``api`` (public) and ``tasks`` (Cloud Tasks only).

Importing this module reads and checks the configuration, so a process configured
unsafely (for example the Auth emulator in production) refuses to start.
"""

from __future__ import annotations

import atexit
import functools
import gc

# No cyclic collection while the modules below are imported: start-up would run many,
# each walking objects that all live as long as the process (bench/cold_start.py (a)
# times ``import main``). The collector is enabled at the end, once they are frozen
# (Python's advice for a process that forks, as gunicorn does); the few cycles
# start-up leaves are frozen with them.
gc.disable()

import anyio
import functions_framework.aio
from spark_http import logs
from spark_http.app import ApiApp
from spark_http.tasks import TasksApp
from starlette.requests import Request
from starlette.responses import Response

from shared.callers import build_app_check, build_task_verifier, build_verifier
from shared.config import Settings
from shared.observe import setup as observe
from shared.wiring import build_components


def _load_lazy_imports() -> None:
    """Import now what every first request would otherwise wait for (the cost is the
    same either way; paid here, no user waits for it):

    * anyio loads its asyncio back-end (and ``Event``, ``Lock``) only when Starlette's
      response first uses them, a large part of what the first request costs above a
      second one (bench/cold_start.py (b) compares them; cProfile shows where);
    * functions-framework serves through gunicorn, whose worker is forked once the port
      is bound and only then imports uvicorn's loop (uvloop) and protocols (httptools,
      websockets) while the first request waits in the socket's backlog
      (``python -X importtime`` on the server); imported before the fork, it inherits
      them.
    """
    import uvicorn.protocols.http.auto
    import uvicorn.protocols.websockets.auto  # noqa: F401 (imported for the worker)
    from uvicorn.loops.auto import auto_loop_factory

    auto_loop_factory()  # imports uvloop, as the worker's would

    async def first_use() -> None:
        anyio.Event()
        anyio.Lock()

    anyio.run(first_use)


settings = Settings.from_env()
logs.configure(settings.project_id)
telemetry = observe.start(settings)  # before the components: the egress takes its tracer
# The spans and metrics still in the exporters' batches leave as the process stops (an
# instance shut down: uvicorn's and gunicorn's workers exit normally on SIGTERM).
atexit.register(telemetry.shutdown)
_components, _stores = build_components(settings)


@functools.cache
def _api() -> ApiApp:
    app_check = build_app_check(settings, _stores)
    return ApiApp(_components.agent, build_verifier(settings), settings, app_check)


@functools.cache
def _tasks() -> TasksApp:
    return TasksApp(_components.handler, build_task_verifier(settings))


# Each deployed function has its own instances: the one this process serves is made
# now, the other only if it is ever called (the ID token checks are the api's alone,
# OIDC's verifier the tasks function's).
if settings.function_target != "tasks":
    _api()
if settings.function_target != "api":
    _tasks()
_load_lazy_imports()
# The cyclic garbage collector, tuned for a server that holds hundreds of streams. What
# start-up made (modules, protobuf descriptors, schemas, clients) lives as long as the
# process: frozen, no full collection walks it again. And a young collection waits for
# 50,000 surviving allocations, not 700: a stream's objects (its run, its frames, its
# document versions) then mostly die of their reference counts before any collection
# walks them. Under many paced streams (bench/stream_overhead.py (c), py-spy --native)
# the default thresholds made frequent young and middle collections and full ones that
# paused every stream at once, a real share of the api's CPU; so tuned, it made none
# in the same run. Cycles are still collected, only less often.
gc.freeze()
gc.set_threshold(50_000, 20, 10)
gc.enable()


@functions_framework.aio.http
async def api(request: Request) -> Response:
    """The public HTTP function: ``/api/spark/agent/...``."""
    return await _api()(request)


@functions_framework.aio.http
async def tasks(request: Request) -> Response:
    """The private HTTP function Cloud Tasks calls: runs task tools, replies, watchdogs."""
    return await _tasks()(request)
