"""``TokenVerifier`` for Firebase ID tokens, checked here, in the event loop.

An ID token is a JWT that Firebase Auth signs with RS256; Google publishes the public
keys as X.509 certificates (``GOOGLE_CERTS``), each for a few hours (``Cache-Control:
max-age``). The checks are firebase-admin's ``verify_id_token`` (its contract test,
``tests/unit/test_auth_firebase.py``, holds both to the same tokens): a ``kid`` and
``alg: RS256`` in the header, the signature by that key, ``aud`` our project, ``iss``
``https://securetoken.google.com/<project>``, a ``sub`` of 1-128 characters, and ``iat``
and ``exp`` (``check_lifetime``). With the Auth emulator (``FIREBASE_AUTH_EMULATOR_HOST``,
which ``Settings.check`` refuses in production) tokens are unsigned, so the key checks
are skipped, as firebase-admin does.

Why not firebase-admin itself: it verifies in a worker thread (it may fetch the keys,
blocking), which a new user's time to first token pays (bench/stream_overhead.py (a)),
and importing it weighs on every cold start (bench/cold_start.py). Here the keys are
fetched off the loop only when stale (hours apart), and a signature is checked in the
event loop's own thread. firebase-admin stays for ``check_revoked`` alone (it asks the Auth
backend on every request), imported only then.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import http.client
import json
import logging
import re
import ssl
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from shared.auth.base import User, user_from_claims
from shared.errors import AuthUnavailable, TokenExpired, TokenRevoked, Unauthenticated

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

log = logging.getLogger(__name__)

GOOGLE_CERTS = (
    "https://www.googleapis.com/robot/v1/metadata/x509/securetoken@system.gserviceaccount.com"
)
ISSUER = "https://securetoken.google.com/"
# The audience of a custom token (one a server mints to sign a user in), never an ID token.
_CUSTOM_TOKEN_AUDIENCE = (
    "https://identitytoolkit.googleapis.com/google.identity.identitytoolkit.v1.IdentityToolkit"
)
_CLOCK_SKEW_SECONDS = 5
# Tokens verified, kept with their claims (a user's requests carry the same one for up
# to an hour): ~1 KB each.
_VERIFIED_KEPT = 4096
# Keys kept this long when their response says nothing of it (Google's say ~6 hours).
_DEFAULT_MAX_AGE = 3600.0
# A token naming a key we do not have refetches the keys at most this often: keys are
# published hours before they sign anything, so such a token is almost always forged.
_UNKNOWN_KEY_REFETCH = 60.0
_FETCH_TIMEOUT = 10.0
# After a failed fetch of stale keys, requests are refused at once (503) this long
# rather than each waiting for a fetch of its own behind the others.
_AFTER_FAILURE = 5.0
_MAX_AGE = re.compile(r"max-age=(\d+)")
_UNAVAILABLE = "Sign-in cannot be checked right now; try again."
_INVALID = "The ID token is not valid."

Fetch = Callable[[str], tuple[bytes, str | None]]
"""Blocking: (the body, its ``Cache-Control``) of a GET of the URL; raises ``OSError``."""


def _https_get(url: str) -> tuple[bytes, str | None]:
    import certifi  # only when the keys are fetched

    context = ssl.create_default_context(cadata=certifi.contents())
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=_FETCH_TIMEOUT, context=context) as response:
        return response.read(), response.headers.get("Cache-Control")


class PublicKeys:
    """Google's token-signing keys by id, fetched when stale (one fetch at a time)."""

    def __init__(
        self,
        url: str = GOOGLE_CERTS,
        fetch: Fetch = _https_get,
        parse: Callable[[bytes], dict[str, RSAPublicKey]] | None = None,
    ) -> None:
        # ``parse``: X.509 certificates by default; App Check's JWKS (shared/appcheck).
        self._url, self._fetch, self._parse = url, fetch, parse or _parse_keys
        self._keys: dict[str, RSAPublicKey] = {}
        self._fresh_until = 0.0
        self._fetched_at = float("-inf")
        self._failed_at = float("-inf")
        self._lock = asyncio.Lock()

    async def get(self, key_id: str) -> RSAPublicKey | None:
        """The key ``key_id`` names (``None``: Google publishes no such key).

        Raises:
            AuthUnavailable: the keys are stale and could not be fetched.
        """
        if self._stale(key_id):
            self._refuse_after_failure()
            async with self._lock:  # whoever waited here finds the keys just fetched
                if self._stale(key_id):
                    self._refuse_after_failure()
                    await self._refresh()
        return self._keys.get(key_id)

    def _refuse_after_failure(self) -> None:
        if time.monotonic() - self._failed_at < _AFTER_FAILURE:
            raise AuthUnavailable(_UNAVAILABLE)

    def _stale(self, key_id: str) -> bool:
        now = time.monotonic()
        if now >= self._fresh_until:
            return True
        return key_id not in self._keys and now - self._fetched_at >= _UNKNOWN_KEY_REFETCH

    async def _refresh(self) -> None:
        try:
            body, cache_control = await asyncio.to_thread(self._fetch, self._url)
            keys = self._parse(body)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if time.monotonic() < self._fresh_until:  # an unknown key's refetch: keep ours
                log.warning("Google's token keys could not be refetched (%s)", exc)
                self._fetched_at = time.monotonic()
                return
            self._failed_at = time.monotonic()
            raise AuthUnavailable(_UNAVAILABLE) from exc
        match = _MAX_AGE.search(cache_control or "")
        max_age = float(match.group(1)) if match else _DEFAULT_MAX_AGE
        self._keys, self._fetched_at = keys, time.monotonic()
        self._fresh_until = self._fetched_at + max_age


def _parse_keys(body: bytes) -> dict[str, RSAPublicKey]:
    """``{key id: PEM certificate}`` as public keys (``ValueError``: not that)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

    certificates = json.loads(body)
    if not isinstance(certificates, dict):
        raise ValueError("the keys' document is not an object")
    keys = {}
    for key_id, pem in certificates.items():
        key = x509.load_pem_x509_certificate(str(pem).encode()).public_key()
        if isinstance(key, RSAPublicKey):
            keys[str(key_id)] = key
    return keys


def _unpadded(part: str) -> bytes:
    """One of a JWT's parts decoded: base64url without its ``=`` padding."""
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _segment(part: str) -> dict[str, Any]:
    """A JWT's header or payload: base64url JSON of an object."""
    try:
        value = json.loads(_unpadded(part))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        raise Unauthenticated(_INVALID) from None
    if not isinstance(value, dict):
        raise Unauthenticated(_INVALID)
    return value


def _signature_valid(key: RSAPublicKey, signed: bytes, signature: str) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    try:
        key.verify(_unpadded(signature), signed, padding.PKCS1v15(), hashes.SHA256())
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


class FirebaseTokenVerifier:
    """Checks signature, audience (our project), issuer and lifetime of ID tokens.

    ``emulated`` (``FIREBASE_AUTH_EMULATOR_HOST`` set) accepts the emulator's unsigned
    tokens. ``check_revoked`` also asks the Auth backend (through firebase-admin, in a
    worker thread) whether the user still exists and the token was not revoked.
    """

    def __init__(
        self,
        project_id: str,
        check_revoked: bool = False,
        *,
        emulated: bool = False,
        keys: PublicKeys | None = None,
    ) -> None:
        self._project = project_id
        self._issuer = ISSUER + project_id
        self._emulated = emulated
        self._keys = keys or PublicKeys()
        self._revocation = _Revocation(project_id) if check_revoked else None
        self._verified: OrderedDict[str, dict[str, Any]] = OrderedDict()

    async def verify(self, token: str) -> User:
        """The token's user. A token verified before is not verified again, only its
        lifetime checked: a user's requests carry the same one for up to an hour. Not
        with ``check_revoked``, which must ask the Auth backend every time."""
        if self._revocation is not None:
            return user_from_claims(await self._revocation.verify(token))
        claims = self._verified.get(token)
        if claims is None:
            claims = await self._verify(token)
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

    async def _verify(self, token: str) -> dict[str, Any]:
        """The token's claims, verified (signature, audience, issuer, lifetime)."""
        parts = token.split(".")
        if len(parts) != 3:
            raise Unauthenticated(_INVALID)
        header, claims = _segment(parts[0]), _segment(parts[1])
        subject = claims.get("sub")
        if claims.get("aud") == _CUSTOM_TOKEN_AUDIENCE:
            raise Unauthenticated("Send an ID token, not a custom token.")
        if not self._emulated and (not header.get("kid") or header.get("alg") != "RS256"):
            raise Unauthenticated(_INVALID)
        if claims.get("aud") != self._project or claims.get("iss") != self._issuer:
            raise Unauthenticated("The ID token is not for this project.")
        if not isinstance(subject, str) or not 0 < len(subject) <= 128:
            raise Unauthenticated("The ID token does not name a user.")
        if not self._emulated:
            key = await self._keys.get(str(header["kid"]))
            signed = f"{parts[0]}.{parts[1]}".encode()
            if key is None or not _signature_valid(key, signed, parts[2]):
                raise Unauthenticated(_INVALID)
        check_lifetime(claims, time.time())
        return {**claims, "uid": subject}


class _Revocation:
    """firebase-admin's ``verify_id_token(check_revoked=True)``: it asks the Auth
    backend on every call (blocking, so in a worker thread)."""

    def __init__(self, project_id: str) -> None:
        import firebase_admin

        name = f"spark-auth-{project_id}"
        try:
            self._app = firebase_admin.get_app(name)
        except ValueError:
            self._app = firebase_admin.initialize_app(options={"projectId": project_id}, name=name)

    async def verify(self, token: str) -> dict[str, Any]:
        return await asyncio.to_thread(self._verify, token)

    def _verify(self, token: str) -> dict[str, Any]:
        import firebase_admin
        from firebase_admin import auth

        try:
            claims: dict[str, Any] = auth.verify_id_token(token, app=self._app, check_revoked=True)
        except auth.ExpiredIdTokenError:
            raise TokenExpired("The ID token has expired; sign in again.") from None
        except (auth.RevokedIdTokenError, auth.UserDisabledError):
            raise TokenRevoked("The ID token has been revoked; sign in again.") from None
        except auth.CertificateFetchError as exc:
            raise AuthUnavailable(_UNAVAILABLE) from exc
        except (auth.InvalidIdTokenError, auth.UserNotFoundError, ValueError):
            raise Unauthenticated(_INVALID) from None
        except firebase_admin.exceptions.FirebaseError as exc:
            raise AuthUnavailable(_UNAVAILABLE) from exc
        check_lifetime(claims, time.time())
        return claims


def check_lifetime(claims: Mapping[str, Any], now: float) -> None:
    """Expiry and issue time, within a few seconds of clock skew."""
    expires, issued = claims.get("exp"), claims.get("iat")
    if not isinstance(expires, (int, float)) or not isinstance(issued, (int, float)):
        raise Unauthenticated(_INVALID)
    if expires + _CLOCK_SKEW_SECONDS < now:
        raise TokenExpired("The ID token has expired; sign in again.")
    if issued - _CLOCK_SKEW_SECONDS > now:
        raise Unauthenticated("The ID token is not valid yet.")
