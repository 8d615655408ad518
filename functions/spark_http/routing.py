"""The ``api`` function's one router: Starlette's ``Route``s, matched as its ``Router``
matches them, answered in our JSON (a 404 or 405 included).

Starlette's ``Router`` answers an unknown path or a wrong method in plain text, and names
only the first route's methods in ``Allow``; here every route of a path adds its own, and
the errors are ours (``responses.guarded`` maps them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route

from shared.agent import NO_MESSAGE
from shared.errors import (
    FamilyNotFound,
    InviteNotFound,
    MemberNotFound,
    MethodNotAllowed,
    NotFound,
)
from shared.families.membership import NO_INVITE, NO_MEMBER, NOT_YOURS
from shared.families.messages import NO_CONVERSATION
from shared.ids import reserved
from shared.observe import tracing
from shared.store.base import NO_LESSON
from shared.tasks.scheduler import NO_TASK
from spark_http.edge import Edge, Routed

Bound = Callable[[Request], Awaitable[Response]]


class _Id(Convertor[str]):
    """An id as the stores make them: letters, digits, ``-`` and ``_``. A path whose id
    is anything else names no route (404), as the schemas' patterns refuse it in a body."""

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class ConversationId(_Id):
    regex = "[A-Za-z0-9_-]{1,64}"


class LessonId(_Id):
    regex = "[A-Za-z0-9_-]{1,128}"


class MessageId(_Id):
    regex = "[A-Za-z0-9_-]{1,128}"


register_url_convertor("conversation", ConversationId())
register_url_convertor("lesson", LessonId())
register_url_convertor("message", MessageId())

# What an id in the path that can name nothing answers, by its parameter: as an id of
# its kind that names nothing does. Firestore reserves ids of the form __x__ (``reserved``;
# it refuses them as ids and as map keys): no document has one, so every id in a path is
# judged by it before anything reads the store (which would fail, a 5xx).
_NAMES_NOTHING: dict[str, Callable[[], NotFound]] = {
    "conversation_id": lambda: NotFound(NO_CONVERSATION),
    "chat_id": lambda: NotFound(NO_CONVERSATION),
    "lesson_id": lambda: NotFound(NO_LESSON),
    "message_id": lambda: NotFound(NO_MESSAGE),
    "task_id": lambda: NotFound(NO_TASK),
    "family_id": lambda: FamilyNotFound(NOT_YOURS),
    "invite_id": lambda: InviteNotFound(NO_INVITE),
    "member_id": lambda: MemberNotFound(NO_MEMBER),
}


def _path_ids(params: dict[str, str]) -> None:
    """Every id in a request's path, by the one rule for ids (``reserved``).

    Raises:
        NotFound: one of them can name nothing (the first, in the path's order).
    """
    for name, value in params.items():
        if reserved(value):
            found = _NAMES_NOTHING.get(name)
            raise found() if found else NotFound("Nothing has this id.")


def _route(routed: Routed, edge: Edge) -> Route:
    """``routed`` as Starlette's ``Route``, its endpoint given ``edge`` and behind the
    route's App Check."""

    async def endpoint(request: Request) -> Response:
        await edge.admit(request, routed.app_check)
        return await routed.endpoint(edge, request)

    route = Route(routed.path, endpoint, methods=[routed.method])
    # Exactly the method the OpenAPI document names: Starlette adds HEAD beside GET.
    route.methods = {routed.method}
    return route


class Router:
    """Finds the endpoint a request's path and method name (Starlette's matching)."""

    def __init__(self, routes: Iterable[Routed], edge: Edge) -> None:
        self.routes = [_route(routed, edge) for routed in routes]

    def find(self, request: Request) -> tuple[Bound, Request]:
        """The endpoint of the route that ``request`` names, and the request with its
        ``path_params`` (a trailing ``/`` is ignored).

        Raises:
            NotFound: no route has this path, or an id in it can name nothing.
            MethodNotAllowed: routes have this path, none this method (``Allow`` names
                theirs, in the order of the routes).
        """
        scope = {**request.scope, "path": request.url.path.rstrip("/") or "/"}
        allowed: list[str] = []
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                _path_ids(child["path_params"])
                tracing.routed(request.method, route.path)
                endpoint: Bound = route.endpoint
                return endpoint, Request({**scope, **child}, request.receive)
            if match is Match.PARTIAL:
                allowed += sorted(route.methods or ())
        if allowed:
            raise MethodNotAllowed(
                f"Use {' or '.join(allowed)} on {request.url.path}.", tuple(allowed)
            )
        raise NotFound(f"No such endpoint: {request.url.path}")
