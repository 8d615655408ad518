"""The HTTP client the model SDKs are given: theirs, with a leaner read of the socket.

(The OpenAI chat request, the hot one, uses no SDK: ``wire.py``. This module serves the
Anthropic and Gemini adapters and the OpenAI SDK's audio, and is imported with them.)

A streamed reply arrives one socket read per token (at 50 tokens/s, 50 reads a second
per stream). httpcore's own network stream wraps every read in ``anyio.fail_after``
(a cancel scope entered and left, the current task looked up three times): ~30 µs a
read, 1.5 ms of the api's CPU per second of one stream, a third of the whole provider
path (bench/stream_overhead.py --py-spy; an isolated reader of 100 paced streams went
from 4.5 to 3.0 ms of CPU per stream-second without it). Here a read keeps its timeout
(a silent connection still fails with ``ReadTimeout``) but arms no timer of its own:
it moves the stream's deadline, and one timer per stream, re-armed only when it fires
early, checks it. Connecting, TLS, writes and everything above the socket (pooling,
HTTP/1.1, the SDKs' retries and errors) are httpcore's and the SDKs' as before.
"""

# The ``timeout`` parameters are httpcore's interface (its backend passes them).
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import select
import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.abc
import anyio.streams.tls
import httpcore2
import httpx2

from shared.llm import wire
from shared.llm.base import CONNECT_TIMEOUT_SECONDS, NO_KEY, READ_TIMEOUT_SECONDS

# The SDKs' own defaults for their client (``openai.DEFAULT_CONNECTION_LIMITS``,
# Anthropic's the same), which a client given to them replaces.
LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)

_BROKEN = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)


def tls_context() -> ssl.SSLContext:
    """The one TLS context of every provider connection of the process (``wire.py``'s):
    making a context loads the system's trust store, and a process configured for
    OpenAI makes three SDK clients (transcription, live audio, speech): 70 ms of CPU
    for four clients each on its own context against 18 ms on one, here."""
    return wire.tls_context()


class DeadlineStream(httpcore2.AsyncNetworkStream):
    """An anyio byte stream whose reads share one deadline timer (see the module)."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self._stream = stream
        self._loop = asyncio.get_running_loop()
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._reader: asyncio.Task[Any] | None = None
        self._expired = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        reader = None
        if timeout is not None:
            reader = asyncio.current_task(self._loop)  # the loop given: no lookup of it
            self._deadline = self._loop.time() + timeout
            if self._timer is None:
                self._timer = self._loop.call_at(self._deadline, self._expire)
        self._reader = reader
        try:
            return await self._stream.receive(max_bytes)
        except anyio.EndOfStream:
            return b""
        except _BROKEN as exc:
            raise httpcore2.ReadError(repr(exc)) from exc
        except asyncio.CancelledError:
            if self._expired and reader is not None:
                self._expired = False
                if reader.uncancel() == 0:  # cancelled by the deadline alone
                    raise httpcore2.ReadTimeout("The read timed out.") from None
            raise
        finally:
            self._reader = None

    def _expire(self) -> None:
        self._timer = None
        reader = self._reader
        if reader is None:
            return  # no read waits: the next one arms the timer again
        if self._loop.time() < self._deadline:  # a later read moved the deadline
            self._timer = self._loop.call_at(self._deadline, self._expire)
            return
        self._expired = True
        reader.cancel()

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            with anyio.fail_after(timeout):
                await self._stream.send(buffer)
        except TimeoutError as exc:
            raise httpcore2.WriteTimeout(repr(exc)) from exc
        except _BROKEN as exc:
            raise httpcore2.WriteError(repr(exc)) from exc

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                wrapped = await anyio.streams.tls.TLSStream.wrap(
                    self._stream,
                    ssl_context=ssl_context,
                    hostname=server_hostname,
                    standard_compatible=False,
                    server_side=False,
                )
        except (TimeoutError, *_BROKEN, ssl.SSLError) as exc:
            await self.aclose()
            if isinstance(exc, TimeoutError):
                raise httpcore2.ConnectTimeout(repr(exc)) from exc
            raise httpcore2.ConnectError(repr(exc)) from exc
        except BaseException:
            await self.aclose()
            raise
        return DeadlineStream(wrapped)

    def get_extra_info(self, info: str) -> Any:
        extra = self._stream.extra
        if info == "ssl_object":
            return extra(anyio.streams.tls.TLSAttribute.ssl_object, None)
        if info == "client_addr":
            return extra(anyio.abc.SocketAttribute.local_address, None)
        if info == "server_addr":
            return extra(anyio.abc.SocketAttribute.remote_address, None)
        if info == "socket":
            return extra(anyio.abc.SocketAttribute.raw_socket, None)
        if info == "is_readable":  # an idle pooled connection the server has closed
            sock = extra(anyio.abc.SocketAttribute.raw_socket, None)
            return sock is None or _readable(sock)
        return None


def _readable(sock: Any) -> bool:
    """Whether ``sock`` has something to read (on an idle connection: it was closed);
    ``poll``, as httpcore does, since ``select`` fails on descriptors above 1023."""
    if sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class DeadlineBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's anyio backend, its streams read as ``DeadlineStream``."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                stream = await anyio.connect_tcp(host, port, local_host=local_address)
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout(repr(exc)) from exc
        except (OSError, anyio.BrokenResourceError) as exc:
            raise httpcore2.ConnectError(repr(exc)) from exc
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        for option in socket_options or ():
            sock.setsockopt(*option)
        return DeadlineStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                stream = await anyio.connect_unix(path)
        except TimeoutError as exc:
            raise httpcore2.ConnectTimeout(repr(exc)) from exc
        except (OSError, anyio.BrokenResourceError) as exc:
            raise httpcore2.ConnectError(repr(exc)) from exc
        return DeadlineStream(stream)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class DeadlineTransport(httpx2.AsyncHTTPTransport):
    """httpx's transport (no proxy), its connections made by ``DeadlineBackend``."""

    def __init__(self, limits: httpx2.Limits = LIMITS) -> None:
        # The parent's own ``__init__`` would build a pool (and an SSL context, ~10 ms)
        # only to have it replaced: httpx takes no backend, httpcore's pool does, and
        # the parent uses nothing else than its pool.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=tls_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=DeadlineBackend(),
        )


def http_client(timeout: httpx2.Timeout) -> httpx2.AsyncClient:
    """The client an SDK is made with: as its default one (limits, timeout, redirects),
    over ``DeadlineTransport``."""
    return httpx2.AsyncClient(transport=DeadlineTransport(), timeout=timeout, follow_redirects=True)


def client_options(api_key: str | None, base_url: str | None, max_retries: int) -> dict[str, Any]:
    """The options the OpenAI and Anthropic clients are made with (one generator made
    both SDKs, so they take the same ones), over ``http_client``."""
    timeout = httpx2.Timeout(READ_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
    return {
        "api_key": api_key or NO_KEY,
        "base_url": base_url,
        "max_retries": max_retries,
        "timeout": timeout,
        "http_client": http_client(timeout),
    }
