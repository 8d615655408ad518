"""What every route of the ``api`` function holds: the facade, the check of callers and
the settings; and the shape of a route (a path, a method, its endpoint and its OpenAPI
operation)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, NamedTuple

from starlette.requests import Request
from starlette.responses import Response

from shared.agent import Agent
from shared.appcheck.guard import HEADER, AppCheck
from shared.appcheck.replays import InMemorySpentTokens
from shared.auth.base import TokenVerifier, User
from shared.config import Settings
from shared.schemas.openapi.parts import Operation
from spark_http.budget import ByteBudget
from spark_http.requests import Body, bearer_token, read_json, wants_event_stream


class Edge:
    """The ``Agent`` facade (the one thing an endpoint asks for work), the caller's check,
    the settings and the budget of chat bodies read at once, for one process."""

    def __init__(
        self,
        agent: Agent,
        verifier: TokenVerifier,
        settings: Settings,
        app_check: AppCheck | None = None,
    ) -> None:
        self.agent = agent
        self.settings = settings
        self.chat_bodies = ByteBudget(settings.chat_body_budget_bytes)
        self._verifier = verifier
        self._app_check = app_check or AppCheck("off", None, InMemorySpentTokens())

    async def admit(self, request: Request, check: AppChecked) -> None:
        """App Check of the request, as its route asks (``SPARK_APP_CHECK``'s mode says
        whether a refusal refuses or is only counted).

        Raises:
            AppCheckRefused, AppCheckReplayed: enforced, and the token does not do.
        """
        if check != "none":
            token = request.headers.get(HEADER)
            await self._app_check.admit(token, costly=check == "consume")

    async def caller(self, request: Request) -> User:
        """The signed-in caller.

        Raises:
            Unauthenticated, AuthUnavailable: no token, a bad one, or none checkable now.
        """
        return await self._verifier.verify(bearer_token(request))

    async def read(
        self, request: Request, model: type[Body], limit: int | None = None
    ) -> tuple[User, Body]:
        """The caller, then the body as ``model``, at most ``limit`` bytes (by default
        ``max_request_bytes``; a stranger is refused before the body is read)."""
        user = await self.caller(request)
        bound = self.settings.max_request_bytes if limit is None else limit
        return user, await read_json(request, model, bound)


Endpoint = Callable[[Edge, Request], Awaitable[Response]]

AppChecked = Literal["none", "check", "consume"]
"""What App Check asks of a route's callers: nothing (the health check), a valid token,
or (a call that costs money: any that starts a model call, a new message's or an
answer's, an approval's or a tool result's; speech; a voice session) a limited-use
token, spent by the call."""


class Routed(NamedTuple):
    """One route: its path (Starlette's template, with ``{name}`` or ``{name:kind}``
    parameters), its one method, the function that answers it, its App Check, and its
    operation in the OpenAPI document (``spark_http.openapi`` walks the routes into it;
    ``None`` for a route a client has no use for, left out of the document). The
    operation's path parameters name the path's, in order."""

    path: str
    method: str
    endpoint: Endpoint
    app_check: AppChecked = "check"
    operation: Operation | None = None


def in_background(request: Request) -> bool:
    """Whether a Cloud Task produces the reply: without a stream no work may follow the
    response (Cloud Functions throttles the CPU then)."""
    return not wants_event_stream(request)
