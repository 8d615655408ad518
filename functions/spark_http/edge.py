"""What every route of the ``api`` function holds: the facade, the check of callers and
the settings; and the shape of a route (a path, a method and its endpoint)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import Response

from shared.agent.facade import Agent
from shared.auth.base import TokenVerifier, User
from shared.config import Settings
from spark_http.requests import Body, bearer_token, read_json, wants_event_stream


class Edge:
    """The ``Agent`` facade (the one thing an endpoint asks for work), the caller's check
    and the settings, for one process."""

    def __init__(self, agent: Agent, verifier: TokenVerifier, settings: Settings) -> None:
        self.agent = agent
        self.settings = settings
        self._verifier = verifier

    async def caller(self, request: Request) -> User:
        """The signed-in caller.

        Raises:
            Unauthenticated, AuthUnavailable: no token, a bad one, or none checkable now.
        """
        return await self._verifier.verify(bearer_token(request))

    async def read(self, request: Request, model: type[Body]) -> tuple[User, Body]:
        """The caller, then the body as ``model`` (a stranger is refused before the body
        is read)."""
        user = await self.caller(request)
        return user, await read_json(request, model, self.settings.max_request_bytes)


Endpoint = Callable[[Edge, Request], Awaitable[Response]]


class Routed(NamedTuple):
    """One route: its path (Starlette's template, with ``{name}`` or ``{name:kind}``
    parameters), its one method, and the function that answers it."""

    path: str
    method: str
    endpoint: Endpoint


def in_background(request: Request) -> bool:
    """Whether a Cloud Task produces the reply: without a stream no work may follow the
    response (Cloud Functions throttles the CPU then)."""
    return not wants_event_stream(request)
