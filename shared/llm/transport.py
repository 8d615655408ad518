"""The HTTP client the model SDKs are given: ``httpx2``'s API over ``wire``'s
connections, so that every provider call goes over one client stack.

(The chat requests, the hot ones, use no SDK: ``wire.WireClient``. This module serves
the OpenAI SDK's audio and live-audio secrets and the Gemini SDK's transcription and
speech, and is imported with them.)

``WireTransport`` is an ``httpx2.AsyncBaseTransport``: the SDK keeps its own request
building, retries, errors and typed responses, and httpx2 its redirects and the
decoding of a compressed body; each request then goes out through ``wire.Pool``, one
per origin: the same framing, keep-alive pool, proxies from the environment, timeouts
and TLS context as the chat requests, held to the same conformance suite
(tests/unit/test_http_conformance.py runs every case through both). It replaces
httpcore's pool, whose reads cost several times ours (``bench/http_client.py``), and
which a client given its own transport left without the environment's proxies.

A request's body is read whole before it is sent (an SDK's bodies are JSON or an
audio clip within the clip limit), so a request on a kept-alive connection that the
server had closed can be sent again on a new one. ``HEAD`` requests, which no SDK
call makes, are not supported (their answers' bodies would be waited for).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from shared.llm import wire
from shared.llm.base import CONNECT_TIMEOUT_SECONDS, NO_KEY, READ_TIMEOUT_SECONDS
from shared.llm.wire.pool import Pool
from shared.llm.wire.pool import tls_context as wire_tls_context

_FOREVER = 86400.0  # a timeout of None: a day


def tls_context() -> ssl.SSLContext:
    """The one TLS context of every provider connection of the process (``wire``'s):
    making a context loads the system's trust store, and a process configured for
    OpenAI makes three SDK clients (transcription, live audio, speech), each of which
    would otherwise load it again (bench/cold_start.py measures the start-up)."""
    return wire_tls_context()


def _failure(exc: wire.WireTransportError, request: httpx2.Request) -> httpx2.TransportError:
    """httpx2's exception for one of ``wire``'s (the SDKs map httpx2's to theirs)."""
    message = str(exc)
    if isinstance(exc, wire.WireConnectTimeout):
        return httpx2.ConnectTimeout(message, request=request)
    if isinstance(exc, wire.WireConnectError):
        return httpx2.ConnectError(message, request=request)
    if isinstance(exc, wire.WireTimeout):
        return httpx2.ReadTimeout(message, request=request)
    return httpx2.RemoteProtocolError(message, request=request)


class _Body(httpx2.AsyncByteStream):
    """An answer's body as it arrives (undecoded: httpx2 decodes it); closing it hands
    the connection back to its pool, or closes it if the body was not read to the end."""

    def __init__(self, pool: Pool, connection: Any, request: httpx2.Request) -> None:
        self._pool = pool
        self._connection = connection
        self._request = request
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        try:
            while (chunk := await connection.next_chunk()) is not None:
                yield chunk
        except wire.WireTransportError as exc:
            raise _failure(exc, self._request) from exc

    async def aclose(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self._connection)


class WireTransport(httpx2.AsyncBaseTransport):
    """httpx2's transport on ``wire``'s pools, one per origin (see the module)."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self._context = context
        self._pools: dict[tuple[str, str, int], Pool] = {}

    def _pool(self, url: httpx2.URL, connect_timeout: float) -> Pool:
        scheme = url.scheme
        port = url.port or (443 if scheme == "https" else 80)
        key = (scheme, url.host, port)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = Pool(
                scheme, url.host, port, context=self._context, connect_timeout=connect_timeout
            )
        pool.connect_timeout = connect_timeout
        return pool

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeouts = request.extensions.get("timeout") or {}
        connect = timeouts.get("connect")
        read = timeouts.get("read")
        try:
            pool = self._pool(request.url, _FOREVER if connect is None else connect)
        except ValueError as exc:
            raise httpx2.UnsupportedProtocol(str(exc), request=request) from exc
        body = await request.aread()
        lines = [f"{request.method} {pool.target}{request.url.raw_path.decode('ascii')} HTTP/1.1"]
        chunked = False
        for name, value in request.headers.raw:
            if name.lower() == b"transfer-encoding":
                chunked = value.lower() == b"chunked"
                if chunked:  # read whole: sent with its length instead
                    continue
            lines.append(f"{name.decode('latin-1')}: {value.decode('latin-1')}")
        if chunked or (body and "content-length" not in request.headers):
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n" + pool.proxy_headers + "\r\n").encode("latin-1")
        try:
            connection = await pool.exchange(head, _FOREVER if read is None else read, body)
        except wire.WireTransportError as exc:
            raise _failure(exc, request) from exc
        return httpx2.Response(
            connection.status,
            headers=connection.raw_headers,
            stream=_Body(pool, connection, request),
            extensions={"http_version": b"HTTP/1.1"},
            request=request,
        )

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()
        self._pools.clear()


def http_client(
    timeout: httpx2.Timeout, context: ssl.SSLContext | None = None
) -> httpx2.AsyncClient:
    """The client an SDK is made with: as its default one (timeout, redirects), over
    ``WireTransport`` (``context``: the TLS context, the process's by default)."""
    return httpx2.AsyncClient(
        transport=WireTransport(context), timeout=timeout, follow_redirects=True
    )


def sync_client() -> httpx2.Client:
    """A sync client for an SDK that insists on one and is never called sync here
    (genai's): on the process's TLS context, so that it makes none of its own."""
    return httpx2.Client(verify=tls_context(), timeout=timeout())


def timeout() -> httpx2.Timeout:
    """What every adapter asks of its HTTP client (``shared/llm/base.py``)."""
    return httpx2.Timeout(READ_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)


def client_options(api_key: str | None, base_url: str | None, max_retries: int) -> dict[str, Any]:
    """The options the OpenAI client is made with, over ``http_client``."""
    return {
        "api_key": api_key or NO_KEY,
        "base_url": base_url,
        "max_retries": max_retries,
        "timeout": timeout(),
        "http_client": http_client(timeout()),
    }
