"""An App Check token's signature and claims, checked in the event loop.

An App Check token is a JWT that App Check signs with RS256; the public keys are a
JSON Web Key Set (``GOOGLE_JWKS``), fetched off the loop when stale by the same
``PublicKeys`` as the ID tokens' certificates (``shared/auth/firebase.py``). The checks
are firebase-admin's ``app_check.verify_token``: ``alg: RS256`` and ``typ: JWT`` in the
header, the signature by the key ``kid`` names, ``iss``
``https://firebaseappcheck.googleapis.com/<project number>``, an ``aud`` naming
``projects/<project number>`` or ``projects/<project id>``, an unexpired ``exp`` and an
app in ``sub``.

Why not firebase-admin itself: its key set's address is fixed to Google's (a class
attribute), so no test could give it keys of its own on loopback; it verifies in a
blocking call; and its ``consume`` asks Google's App Check service over the network on
each call. Replay protection is ours instead (``replays.py``): a write with a
precondition in Firestore, the same in every process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from shared.auth.firebase import PublicKeys

GOOGLE_JWKS = "https://firebaseappcheck.googleapis.com/v1/jwks"
ISSUER = "https://firebaseappcheck.googleapis.com/"
# A token just past its expiry on a server whose clock runs behind is still refused
# after this many seconds (the ID tokens' allowance too).
_CLOCK_SKEW_SECONDS = 5

Reason = Literal["missing", "invalid", "expired", "replayed"]


class Rejected(Exception):
    """The token is not one of our app's (``reason`` says why; never shown the caller
    beyond that word)."""

    def __init__(self, reason: Reason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason: Reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AppToken:
    """A verified App Check token: the app it vouches for, and what names it once."""

    app_id: str
    token_id: str  # its ``jti``, or a digest of the token when it has none
    expires_at: datetime


def parse_jwks(body: bytes) -> dict[str, RSAPublicKey]:
    """A JSON Web Key Set's RSA keys by ``kid`` (``ValueError``: not a key set)."""
    try:
        keys = jwt.PyJWKSet.from_dict(json.loads(body))
    except (jwt.PyJWKSetError, jwt.InvalidKeyError, TypeError, KeyError) as exc:
        raise ValueError(f"not a JSON Web Key Set: {exc}") from exc
    found = {k.key_id: k.key for k in keys.keys if k.key_id and isinstance(k.key, RSAPublicKey)}
    if not found:
        raise ValueError("the JSON Web Key Set has no RSA key")
    return found


def app_check_keys(url: str = GOOGLE_JWKS) -> PublicKeys:
    """App Check's public keys, read from ``url`` when stale."""
    return PublicKeys(url, parse=parse_jwks)


class AppCheckVerifier:
    """Verifies App Check tokens for one project."""

    def __init__(self, project_number: str, project_id: str, keys: PublicKeys) -> None:
        self._issuer = f"{ISSUER}{project_number}"
        self._audiences = [f"projects/{project_number}", f"projects/{project_id}"]
        self._keys = keys

    async def verify(self, token: str) -> AppToken:
        """The app ``token`` vouches for.

        Raises:
            Rejected: it is not a valid App Check token of this project.
            AuthUnavailable: the keys are stale and could not be fetched.
        """
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError as exc:
            raise Rejected("invalid", "not a JWT") from exc
        if header.get("alg") != "RS256" or header.get("typ") != "JWT":
            raise Rejected("invalid", "not an RS256 JWT")
        kid = header.get("kid")
        key = await self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise Rejected("invalid", "signed by no key of App Check's")
        claims = _decoded(token, key, self._audiences, self._issuer)
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise Rejected("invalid", "names no app")
        jti = claims.get("jti")
        if not isinstance(jti, str) or not jti:
            jti = hashlib.sha256(token.encode()).hexdigest()
        return AppToken(subject, jti, datetime.fromtimestamp(int(claims["exp"]), UTC))


def _decoded(token: str, key: RSAPublicKey, audiences: list[str], issuer: str) -> dict[str, Any]:
    try:
        return jwt.decode(
            token,
            key,
            algorithms=["RS256"],
            audience=audiences,
            issuer=issuer,
            leeway=_CLOCK_SKEW_SECONDS,
            options={"require": ["exp", "iss", "aud", "sub"]},
        )
    except jwt.ExpiredSignatureError as exc:
        raise Rejected("expired") from exc
    except jwt.InvalidAudienceError as exc:
        raise Rejected("invalid", "for another project (aud)") from exc
    except jwt.InvalidIssuerError as exc:
        raise Rejected("invalid", "from another issuer (iss)") from exc
    except jwt.InvalidTokenError as exc:
        raise Rejected("invalid", type(exc).__name__) from exc
