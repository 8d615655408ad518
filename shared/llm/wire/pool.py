"""The connections to one origin, directly or through its proxy: the idle ones kept for
the next request, and a request sent once more when a reused one was closed while idle."""

from __future__ import annotations

import asyncio
import collections
import functools
import ssl
import time

from shared.llm.wire.connection import Connection
from shared.llm.wire.errors import (
    WireConnectError,
    WireConnectTimeout,
    WireTimeout,
    WireTransportError,
)
from shared.llm.wire.proxy import Proxy, Tunnel, proxy_for

CONNECT_TIMEOUT_SECONDS = 10.0


IDLE_SECONDS = 30.0


MAX_IDLE = 100
"""Idle connections kept per origin (the SDKs' own ``max_keepalive_connections``)."""


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one TLS context of the process's provider connections (ours and the SDKs'):
    making one loads the system's trust store (bench/cold_start.py)."""
    from certifi import where as ca_bundle

    context = ssl.create_default_context(cafile=ca_bundle())
    context.set_alpn_protocols(["http/1.1"])
    return context


class Pool:
    """Connections to one origin, directly or through the proxy the environment
    names for it; the idle ones kept for the next request (see the module)."""

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        *,
        context: ssl.SSLContext | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        if scheme not in ("http", "https") or not host:
            raise ValueError(f"not an http(s) origin: {scheme}://{host}")
        self.tls = scheme == "https"
        self.host = host
        self.port = port
        default_port = port == (443 if self.tls else 80)
        name = f"[{host}]" if ":" in host else host
        self.authority = name if default_port else f"{name}:{port}"
        self.proxy = proxy_for(scheme, host)
        self._context = context
        self.connect_timeout = connect_timeout
        self._idle: collections.deque[Connection] = collections.deque()
        # Through a proxy, a plain request names its origin (absolute form) and brings
        # the proxy's credentials; a tunnelled one is the origin's business alone.
        forwarded = self.proxy is not None and not self.tls
        self.target = f"http://{self.authority}" if forwarded else ""
        credentials = forwarded and self.proxy is not None and self.proxy.authorization
        self.proxy_headers = f"Proxy-Authorization: {credentials}\r\n" if credentials else ""

    async def exchange(self, request: bytes, read_timeout: float, body: bytes = b"") -> Connection:
        """Send ``request`` (then ``body``) and read its answer's head; once more on a
        new connection if a reused one fails before answering (the server closed it
        while idle)."""
        connection = self._reused()
        if connection is not None:
            connection.read_timeout = read_timeout
            try:
                return await self._send(connection, request, body)
            except WireTimeout:
                raise
            except WireTransportError:
                if connection.received:
                    raise
        return await self._send(await self._connect(read_timeout), request, body)

    async def _send(self, connection: Connection, request: bytes, body: bytes) -> Connection:
        try:
            connection.send(request)
            if body:
                await connection.drain()
                connection.send_more(body)
            await connection.head()
        except BaseException:
            connection.close()
            raise
        return connection

    def _reused(self) -> Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()  # the most recently used: the likeliest alive
            if connection.usable and now - connection.idle_since < IDLE_SECONDS:
                return connection
            connection.close()
        return None

    async def _connect(self, read_timeout: float) -> Connection:
        loop = asyncio.get_running_loop()
        context = (self._context or tls_context()) if self.tls else None
        proxy = self.proxy
        if proxy is not None and proxy.scheme != "http":
            raise WireConnectError(f"a proxy is reached over http:// only, not {proxy.scheme}://")
        try:
            async with asyncio.timeout(self.connect_timeout):
                if proxy is None:
                    _, connection = await loop.create_connection(
                        lambda: Connection(loop, read_timeout),
                        self.host,
                        self.port,
                        ssl=context,
                        server_hostname=self.host if context else None,
                    )
                elif context is None:
                    _, connection = await loop.create_connection(
                        lambda: Connection(loop, read_timeout), proxy.host, proxy.port
                    )
                else:
                    connection = await self._tunnel(loop, proxy, context, read_timeout)
        except TimeoutError:
            raise WireConnectTimeout(f"no connection within {self.connect_timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            via = f" through the proxy {proxy.host}:{proxy.port}" if proxy else ""
            raise WireConnectError(f"could not connect{via}: {exc!r}") from exc
        return connection

    async def _tunnel(
        self,
        loop: asyncio.AbstractEventLoop,
        proxy: Proxy,
        context: ssl.SSLContext,
        read_timeout: float,
    ) -> Connection:
        """A TLS connection to the origin through a ``CONNECT`` tunnel of ``proxy``."""
        raw, tunnel = await loop.create_connection(lambda: Tunnel(loop), proxy.host, proxy.port)
        try:
            credentials = (
                f"Proxy-Authorization: {proxy.authorization}\r\n" if proxy.authorization else ""
            )
            raw.write(
                f"CONNECT {self.host}:{self.port} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"{credentials}\r\n".encode()
            )
            answer = await tunnel.answer()
            status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[1].startswith("2"):
                raise WireConnectError(f"the proxy refused the tunnel: {status_line}")
            connection = Connection(loop, read_timeout)
            tls = await loop.start_tls(raw, connection, context, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise
        if tls is None:
            raise WireConnectError("the tunnel closed during the TLS handshake")
        connection.connection_made(tls)
        return connection

    def release(self, connection: Connection) -> None:
        """Back to the pool if its answer was read to the end and it may be reused;
        closed otherwise (a cancelled or broken read, or ``Connection: close``)."""
        if connection.complete and connection.usable and len(self._idle) < MAX_IDLE:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()

    async def aclose(self) -> None:
        while self._idle:
            self._idle.pop().close()
