"""Verifying Cloud Tasks' OIDC tokens (the only module that imports ``google.oauth2``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

import google.auth.exceptions
import google.auth.transport.requests
from google.oauth2 import id_token

from shared.auth.base import bearer
from shared.auth.tasks import REFUSED
from shared.errors import AuthUnavailable, Forbidden, Unauthenticated

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
ISSUERS = ("https://accounts.google.com", "accounts.google.com")


class _CachedCerts(google.auth.transport.Request):
    """A transport that keeps Google's certificates for as long as their
    ``Cache-Control: max-age`` allows (an hour when it says nothing), so a task call
    is verified without fetching them again."""

    def __init__(self, inner: Any, default_seconds: float = 3600) -> None:
        self._inner = inner
        self._default = default_seconds
        self._cached: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self.fetches = 0

    def __call__(
        self,
        url: Any,
        method: Any = "GET",
        body: Any = None,
        headers: Any = None,
        timeout: Any = None,
        **kwargs: Any,
    ) -> Any:
        if method != "GET" or body is not None:
            return self._inner(url, method, body, headers, timeout, **kwargs)
        with self._lock:
            hit = self._cached.get(url)
            if hit is not None and hit[0] > time.monotonic():
                return hit[1]
            response = self._inner(url, method, body, headers, timeout, **kwargs)
            self.fetches += 1
            if response.status == 200:
                control = response.headers.get("cache-control", "")
                age = response.headers.get("age", "0")
                ttl = _max_age(control, self._default) - (int(age) if age.isdigit() else 0)
                if ttl > 0 and "no-store" not in control and "no-cache" not in control:
                    self._cached[url] = (time.monotonic() + ttl, response)
            return response


def _max_age(header: str, default: float) -> float:
    for directive in header.split(","):
        name, _, value = directive.strip().partition("=")
        if name.lower() == "max-age" and value.isdigit():
            return float(value)
    return default


class OidcTaskVerifier:
    """Accepts calls with a Google-signed ID token for ``audience`` (the tasks function's
    URL) issued to ``service_account``, the account our queue's tasks run as."""

    def __init__(
        self, audience: str, service_account: str, certs_url: str = GOOGLE_CERTS_URL
    ) -> None:
        self._audience = audience
        self._service_account = service_account
        self._certs_url = certs_url
        self._transport = _CachedCerts(google.auth.transport.requests.Request())

    def _claims(self, token: str) -> Mapping[str, Any]:
        claims: Mapping[str, Any] = id_token.verify_token(
            token, self._transport, audience=self._audience, certs_url=self._certs_url
        )
        return claims

    async def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        token = bearer(headers.get("authorization"))
        if token is None:
            raise Unauthenticated(REFUSED)
        try:
            claims = await asyncio.to_thread(self._claims, token)
        except google.auth.exceptions.TransportError as exc:
            raise AuthUnavailable("Google's token keys cannot be fetched right now.") from exc
        except (ValueError, google.auth.exceptions.GoogleAuthError):
            raise Unauthenticated(REFUSED) from None
        if claims.get("iss") not in ISSUERS:
            raise Unauthenticated(REFUSED)
        if claims.get("email") != self._service_account or claims.get("email_verified") is not True:
            raise Forbidden(REFUSED)
