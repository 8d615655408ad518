"""``TokenVerifier`` on firebase-admin (the only module that imports it)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any

import firebase_admin
from firebase_admin import auth, credentials
from google.auth.credentials import AnonymousCredentials

from shared.auth.base import User, user_from_claims
from shared.errors import AuthUnavailable, TokenExpired, TokenRevoked, Unauthenticated

_CLOCK_SKEW_SECONDS = 5
# Tokens verified, kept with their claims (a user's requests carry the same one for up
# to an hour): ~1 KB each.
_VERIFIED_KEPT = 4096


class _NoCredentials(credentials.Base):  # type: ignore[misc]
    """Verifying ID tokens needs only the project id and Google's public keys.

    Without this, firebase-admin would look up Application Default Credentials,
    which a local machine may not have.
    """

    def get_credential(self) -> Any:
        return AnonymousCredentials()  # type: ignore[no-untyped-call]


class FirebaseTokenVerifier:
    """Checks signature, audience (our project), issuer and expiry of ID tokens.

    ``verify_id_token`` is blocking (it may fetch Google's public keys), so it runs
    in a worker thread. With ``FIREBASE_AUTH_EMULATOR_HOST`` set, firebase-admin
    accepts the emulator's unsigned tokens; ``Settings.check`` refuses that in
    production. ``check_revoked`` also asks the Auth backend whether the user still
    exists and the token was not revoked.
    """

    def __init__(self, project_id: str, check_revoked: bool = False) -> None:
        name = f"spark-auth-{project_id}"
        try:
            self._app = firebase_admin.get_app(name)
        except ValueError:
            self._app = firebase_admin.initialize_app(
                _NoCredentials() if not check_revoked else None,
                options={"projectId": project_id},
                name=name,
            )
        self._check_revoked = check_revoked
        self._verified: OrderedDict[str, dict[str, Any]] = OrderedDict()

    async def verify(self, token: str) -> User:
        """The token's user. A token verified before is not verified again, only its
        lifetime checked: parsing and checking it in a worker thread was ~3 % of the
        api's CPU per stream (py-spy, bench/stream_overhead.py). Not with
        ``check_revoked``, which must ask the Auth backend every time."""
        claims = self._verified.get(token)
        if claims is None:
            claims = await asyncio.to_thread(self._verify, token)
            if not self._check_revoked:
                self._verified[token] = claims
                if len(self._verified) > _VERIFIED_KEPT:
                    self._verified.popitem(last=False)
        else:
            try:
                check_lifetime(claims, time.time())
            except TokenExpired:
                self._verified.pop(token, None)
                raise
        return user_from_claims(claims)

    def _verify(self, token: str) -> dict[str, Any]:
        """The token's claims, verified (signature, audience, issuer, lifetime)."""
        try:
            claims: dict[str, Any] = auth.verify_id_token(
                token, app=self._app, check_revoked=self._check_revoked
            )
        except auth.ExpiredIdTokenError:
            raise TokenExpired("The ID token has expired; sign in again.") from None
        except (auth.RevokedIdTokenError, auth.UserDisabledError):
            raise TokenRevoked("The ID token has been revoked; sign in again.") from None
        except auth.CertificateFetchError as exc:
            raise AuthUnavailable("Sign-in cannot be checked right now; try again.") from exc
        except (auth.InvalidIdTokenError, auth.UserNotFoundError, ValueError):
            raise Unauthenticated("The ID token is not valid.") from None
        except firebase_admin.exceptions.FirebaseError as exc:
            raise AuthUnavailable("Sign-in cannot be checked right now; try again.") from exc
        check_lifetime(claims, time.time())
        return claims


def check_lifetime(claims: dict[str, Any], now: float) -> None:
    """Expiry and issue time, checked here too: firebase-admin skips them for the
    emulator's unsigned tokens, and a stale token must fail the same way everywhere."""
    expires, issued = claims.get("exp"), claims.get("iat")
    if not isinstance(expires, (int, float)) or not isinstance(issued, (int, float)):
        raise Unauthenticated("The ID token is not valid.")
    if expires + _CLOCK_SKEW_SECONDS < now:
        raise TokenExpired("The ID token has expired; sign in again.")
    if issued - _CLOCK_SKEW_SECONDS > now:
        raise Unauthenticated("The ID token is not valid yet.")
