"""The authentication interface the HTTP edge depends on."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from shared.errors import Unauthenticated

# A uid becomes a Firestore path segment: no slashes, not "." / "..", not __reserved__,
# and not one of the server's own top-level collections (``SERVER_COLLECTIONS``).
_UID = re.compile(
    r"^(?!\.\.?$)(?!__.*__$)(?!(?:families|inviteTokens|deletions|appCheckTokens)$)[^/]{1,128}$"
)
SERVER_COLLECTIONS = ("families", "inviteTokens", "deletions", "appCheckTokens")
"""Top-level collections that are not a user's: the family system's truth (§8), the
records of erased accounts (§15) and App Check's spent tokens."""


@dataclass(frozen=True, slots=True)
class User:
    """A signed-in user, from a verified ID token."""

    uid: str
    name: str | None = None
    email: str | None = None


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or ``None``."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def user_from_claims(claims: dict[str, object]) -> User:
    """The ``User`` a verified token's claims describe."""
    uid = claims.get("uid") or claims.get("sub")
    if not isinstance(uid, str) or not _UID.match(uid):
        raise Unauthenticated("The ID token does not name a usable user id.")
    name, email = claims.get("name"), claims.get("email")
    return User(
        uid=uid,
        name=name if isinstance(name, str) else None,
        email=email if isinstance(email, str) else None,
    )


class TokenVerifier(Protocol):
    """Turns a bearer token into a ``User``."""

    async def verify(self, token: str) -> User:
        """The user the token belongs to.

        Raises:
            Unauthenticated: the token is malformed, forged, expired or revoked.
            AuthUnavailable: the token cannot be checked right now.
        """
        ...


class StaticTokenVerifier:
    """A fake for unit tests: accepts exactly the tokens it was given."""

    def __init__(self, users: dict[str, User]) -> None:
        self._users = users

    async def verify(self, token: str) -> User:
        try:
            return self._users[token]
        except KeyError:
            raise Unauthenticated("The ID token is not valid.") from None
