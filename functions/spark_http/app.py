"""The ``api`` function: every route in one router; each endpoint parses, authenticates,
validates, asks the ``Agent`` facade and answers; ``responses.guarded`` maps errors.

The endpoints live by concern: ``conversations`` (a message, its stream, a stop, people's
answers, a task's cancel), ``manage`` (a title, a delete, feedback), ``files``
(uploads, a message's files), ``voice``, ``lessons``, ``families`` (and the caller's
settings), ``exports`` (a person's data as a zip) and ``about`` (health, OpenAPI, model).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from shared.agent import Agent
from shared.appcheck.guard import AppCheck
from shared.auth.base import TokenVerifier
from shared.config import Settings
from spark_http import (
    about,
    chat,
    conversations,
    exports,
    families,
    files,
    lessons,
    manage,
    voice,
)
from spark_http.edge import Edge
from spark_http.responses import guarded
from spark_http.routing import Router

# Every route of the api, the most requested first (matching stops at the first).
ROUTES = (
    *conversations.ROUTES,
    *chat.ROUTES,
    *manage.ROUTES,
    *files.ROUTES,
    *voice.ROUTES,
    *lessons.ROUTES,
    *families.ROUTES,
    *exports.ROUTES,
    *about.ROUTES,
)


class ApiApp:
    """Serves ``/api/spark/...`` for one process."""

    def __init__(
        self,
        agent: Agent,
        verifier: TokenVerifier,
        settings: Settings,
        app_check: AppCheck | None = None,
    ) -> None:
        self._agent = agent
        self._router = Router(ROUTES, Edge(agent, verifier, settings, app_check))

    async def __call__(self, request: Request) -> Response:
        return await guarded(self._dispatch, request)

    async def _dispatch(self, request: Request) -> Response:
        endpoint, routed = self._router.find(request)
        return await endpoint(routed)

    async def drain(self) -> None:
        """Wait for runs still going (their clients may have left)."""
        await self._agent.drain()
