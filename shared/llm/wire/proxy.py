"""The proxy the environment names for an origin (``HTTPS_PROXY``, ``HTTP_PROXY``,
``ALL_PROXY``, ``NO_PROXY``, as httpx reads them) and the ``CONNECT`` tunnel through it."""

from __future__ import annotations

import asyncio
import base64
import urllib.request
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from shared.llm.wire.errors import WireConnectError


class Tunnel(asyncio.Protocol):
    """A connection to a proxy until it answers our ``CONNECT``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._head = bytearray()
        self._answered: asyncio.Future[bytes] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        self._head += data
        if b"\r\n\r\n" in self._head and not self._answered.done():
            self._answered.set_result(bytes(self._head))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._answered.done():
            self._answered.set_exception(
                WireConnectError(f"the proxy closed the connection: {exc!r}")
            )

    async def answer(self) -> bytes:
        return await self._answered


@dataclass(frozen=True)
class Proxy:
    """A proxy the environment names (``http://[user:password@]host:port``)."""

    scheme: str
    host: str
    port: int
    authorization: str | None  # the ``Proxy-Authorization`` value, if it has credentials


def bypassed(host: str, no_proxy: str) -> bool:
    """Whether ``no_proxy`` (``NO_PROXY``'s value) names ``host``: ``*``, the host
    itself, or a domain it is in (``example.com`` and ``.example.com`` both take
    ``api.example.com``); a port after a name is not looked at."""
    host = host.lower().strip("[]")
    for entry in no_proxy.lower().split(","):
        entry = entry.strip()
        if entry.startswith("[") and "]" in entry:  # [::1] or [::1]:8080
            entry = entry[1 : entry.index("]")]
        elif entry.count(":") == 1:  # name:port
            entry = entry.split(":")[0]
        entry = entry.lstrip(".")
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return True
    return False


def proxy_for(scheme: str, host: str) -> Proxy | None:
    """The proxy the environment names for ``scheme://host`` (``HTTPS_PROXY``,
    ``HTTP_PROXY`` or ``ALL_PROXY``, lower case first), unless ``NO_PROXY`` names the
    host or a domain it is in (``bypassed``): read through the standard library, as
    httpx reads them. (They are the process's, as ``SSL_CERT_FILE`` is OpenSSL's, not
    ``Settings``.)"""
    proxies = urllib.request.getproxies_environment()
    url = proxies.get(scheme) or proxies.get("all")
    if not url or bypassed(host, proxies.get("no", "")):
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode()
    return Proxy(parts.scheme, parts.hostname or "", parts.port or 80, authorization)
