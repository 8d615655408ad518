"""A lean streaming HTTP/1.1 client for the model's chat requests (asyncio + httptools).

A chat request is one POST whose answer is an SSE body read line by line, and the
OpenAI adapter already parses those lines itself. Sent through the SDK instead, each
request paid the SDK's request machinery (~13 % of the api's py-spy samples at 50–100
streams: options, headers, retries' bookkeeping) and each token the read through
httpx2, httpcore2, h11 and anyio (~16 %). Here a connection is an ``asyncio.Protocol``
whose bytes go straight to httptools' C parser, and a reader waits on one future per
socket read.

What the SDKs gave that a production client needs is kept:

* a keep-alive pool per origin (a connection is reused only after its response was
  read to the end and the server allowed it; an idle one is dropped after
  ``IDLE_SECONDS``, before servers usually close theirs);
* a request that fails on a reused connection before any byte of its response is sent
  again once on a new one (the server closed it while idle);
* retries with backoff on connection failures and on 408, 409, 429 and 5xx, honouring
  ``Retry-After`` up to ``MAX_RETRY_AFTER``, as the OpenAI SDK does;
* a connect timeout and a read timeout (a reply silent for two minutes fails), with
  one timer per connection, moved by each read, not one per read;
* cancelling the reader closes the connection (it never returns to the pool).

Errors are this module's (``WireStatusError``, ``WireTransportError``); the adapter
turns them into ours.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import functools
import json
import random
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

READ_TIMEOUT_SECONDS = 120.0
CONNECT_TIMEOUT_SECONDS = 10.0
IDLE_SECONDS = 30.0
MAX_IDLE = 100
"""Idle connections kept per origin (the SDKs' own ``max_keepalive_connections``)."""
MAX_RETRY_AFTER = 60.0
RETRY_STATUSES = frozenset({408, 409, 429})
_ERROR_BODY_LIMIT = 65536
_PAUSE_AT = 1 << 20  # bytes buffered before the socket's reading is paused


class WireError(Exception):
    """A chat request that failed (the adapter makes it one of ours)."""


class WireTransportError(WireError):
    """The connection could not be made, or broke, or went silent too long."""


class WireTimeout(WireTransportError):
    """Nothing arrived for the read timeout, or the connection took too long to open."""


class WireStatusError(WireError):
    """The provider answered with an error status; ``message`` is what it said."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one TLS context of the process's provider connections (ours and the SDKs'):
    making one loads the system's trust store, ~18 ms of CPU here."""
    from certifi import where as ca_bundle

    context = ssl.create_default_context(cafile=ca_bundle())
    context.set_alpn_protocols(["http/1.1"])
    return context


class _Connection(asyncio.Protocol):
    """One socket: its response's status, headers and body chunks as they arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float) -> None:
        self._loop = loop
        self._read_timeout = read_timeout
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._failure: Exception | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self.headed = False
        self.complete = False
        self.keep_alive = False
        self.received = False
        self.idle_since = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio's: no isinstance check.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(WireTransportError(f"malformed HTTP response: {exc}"))
            self.close()
            return
        if self._buffered > _PAUSE_AT and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost says what it meant

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.complete:
            self._fail(WireTransportError(f"the connection closed: {exc!r}"))

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        self.headed = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # The reader's side
    @property
    def usable(self) -> bool:
        """Open, and its last response read to the end with keep-alive allowed."""
        transport = self._transport
        return transport is not None and not transport.is_closing() and self.keep_alive

    def send(self, request: bytes) -> None:
        """Start a new exchange on this connection and write ``request``."""
        self._parser = httptools.HttpResponseParser(self)
        self.status, self.headers, self.headed, self.complete = 0, {}, False, False
        self.keep_alive = self.received = False
        self._chunks.clear()
        self._buffered = 0
        if self._transport is None:
            raise WireTransportError("the connection closed")
        self._transport.write(request)

    async def head(self) -> None:
        """Wait for the response's status and headers."""
        while not self.headed:
            await self._wait()

    async def next_chunk(self) -> bytes | None:
        """The body's next bytes, or ``None`` at its end."""
        while not self._chunks:
            if self.complete:
                return None
            await self._wait()
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < _PAUSE_AT // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return chunk

    async def body(self, limit: int) -> bytes:
        """The rest of the body, at most ``limit`` bytes of it."""
        parts: list[bytes] = []
        size = 0
        while size < limit and (chunk := await self.next_chunk()) is not None:
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)[:limit]

    def close(self) -> None:
        self.keep_alive = False
        if self._transport is not None:
            self._transport.close()

    async def _wait(self) -> None:
        if self._failure is not None:
            raise self._failure
        self._waiter = self._loop.create_future()
        # One timer per connection: a read moves the deadline; the timer, when it fires
        # early, re-arms itself for the deadline it then finds.
        self._deadline = self._loop.time() + self._read_timeout
        if self._timer is None:
            self._timer = self._loop.call_at(self._deadline, self._expire)
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _expire(self) -> None:
        self._timer = None
        if self._waiter is None or self._waiter.done():
            return
        if self._loop.time() < self._deadline:
            self._timer = self._loop.call_at(self._deadline, self._expire)
            return
        self._waiter.set_exception(WireTimeout(f"nothing arrived for {self._read_timeout:g} s"))
        self.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self._failure is None:
            self._failure = exc
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(self._failure)


def encode_json(payload: Any) -> bytes:
    """``payload`` as compact UTF-8 JSON, as every request body is sent."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``Retry-After``, in
    seconds or as a date), if it asked for a sensible time."""
    try:
        if "retry-after-ms" in headers:
            wait = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            value = headers["retry-after"]
            try:
                wait = float(value)
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                wait = when.timestamp() - time.time()
        else:
            return None
    except (ValueError, TypeError, OverflowError):
        return None
    return wait if 0 <= wait <= MAX_RETRY_AFTER else None


def backoff(attempt: int, retry_after: float | None) -> float:
    """The wait before retry ``attempt`` (0 first): the server's, or 0.5 s doubling to
    8 s, less up to a quarter at random (the OpenAI SDK's schedule)."""
    if retry_after is not None:
        return retry_after
    return min(0.5 * 2.0**attempt, 8.0) * (1 - 0.25 * random.random())


def _error_message(body: bytes) -> str:
    """What the provider said in its error body (OpenAI's, Anthropic's and Gemini's
    ``{"error": {"message": ...}}``), or the body's start."""
    try:
        error = json.loads(body).get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    except (ValueError, AttributeError):
        pass
    return body[:500].decode("utf-8", "replace") or "no detail"


class WireClient:
    """POSTs JSON to one origin and streams the answer's body (see the module)."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        max_retries: int = 2,
        *,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
        read_timeout: float = READ_TIMEOUT_SECONDS,
        context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path.rstrip("/")
        default_port = self._port == (443 if self._tls else 80)
        authority = self._host if default_port else f"{self._host}:{self._port}"
        fixed = {"Host": authority, "User-Agent": "spark-agent", **headers}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._max_retries = max_retries
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._context = context
        self._idle: collections.deque[_Connection] = collections.deque()

    @asynccontextmanager
    async def stream(self, path: str, payload: Any) -> AsyncIterator[AsyncIterator[bytes]]:
        """POST ``payload`` as JSON (``bytes``: JSON already) to ``path``; the body of a
        2xx answer, chunk by chunk.

        Raises:
            WireStatusError: the answer's status is not 2xx (after the retries).
            WireTransportError: no answer (after the retries), or the body broke off.
        """
        body = payload if isinstance(payload, bytes) else encode_json(payload)
        request = (
            f"POST {self._prefix}{path} HTTP/1.1\r\n".encode()
            + self._head
            + b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        connection = await self._answered(request)
        try:
            yield self._chunks(connection)
        finally:
            self._release(connection)

    async def _answered(self, request: bytes) -> _Connection:
        """A connection whose answer to ``request`` has a 2xx status (its headers read)."""
        attempt = 0
        while True:
            wait: float | None
            try:
                connection = await self._exchange(request)
            except WireTransportError:
                if attempt >= self._max_retries:
                    raise
                wait = None
            else:
                status = connection.status
                if 200 <= status < 300:
                    return connection
                retryable = status in RETRY_STATUSES or status >= 500
                if not retryable or attempt >= self._max_retries:
                    try:
                        message = _error_message(await connection.body(_ERROR_BODY_LIMIT))
                    except WireError:
                        message = "no detail"
                    finally:
                        self._release(connection)
                    raise WireStatusError(status, message)
                wait = _retry_after(connection.headers)
                connection.close()
            await asyncio.sleep(backoff(attempt, wait))
            attempt += 1

    async def _exchange(self, request: bytes) -> _Connection:
        """Send ``request`` and read its answer's head; once more on a new connection if
        a reused one fails before answering (the server closed it while idle)."""
        connection = self._reused()
        if connection is not None:
            try:
                return await self._send(connection, request)
            except WireTimeout:
                raise
            except WireTransportError:
                if connection.received:
                    raise
        return await self._send(await self._connect(), request)

    async def _send(self, connection: _Connection, request: bytes) -> _Connection:
        try:
            connection.send(request)
            await connection.head()
        except BaseException:
            connection.close()
            raise
        return connection

    def _reused(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()  # the most recently used: the likeliest alive
            if connection.usable and now - connection.idle_since < IDLE_SECONDS:
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        context = (self._context or tls_context()) if self._tls else None
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection(loop, self._read_timeout),
                    self._host,
                    self._port,
                    ssl=context,
                    server_hostname=self._host if context else None,
                )
        except TimeoutError:
            raise WireTimeout(f"no connection within {self._connect_timeout:g} s") from None
        except OSError as exc:
            raise WireTransportError(f"could not connect: {exc!r}") from exc
        return connection

    async def _chunks(self, connection: _Connection) -> AsyncIterator[bytes]:
        while (chunk := await connection.next_chunk()) is not None:
            yield chunk

    def _release(self, connection: _Connection) -> None:
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
