"""The one HTTP/1.1 client of every provider call (asyncio + httptools).

The adapters' streamed chat replies go through ``WireClient`` here; the SDKs' calls
(OpenAI's audio and live-audio secrets, Gemini's transcription and speech) through
``transport.WireTransport``, an ``httpx2`` transport over the same ``Pool`` and
connections. A connection is an ``asyncio.Protocol`` whose bytes go straight to
httptools' C parser (llhttp, Node's), and a reader waits on one future per socket read.

Why not a library's client. A chat request is one POST whose answer is an SSE body
read line by line, and the api's cost is its CPU per second of a streamed reply, that
is per socket read, one a token. Sent through the SDK, each request paid the SDK's
request machinery and each read httpx2, httpcore2, h11 and anyio, several times what a
read costs here. aiohttp, the client the OpenAI SDK offers as its fast backend, costs
far less than those but still clearly more a read than this one (its stream reader,
its buffers and its response objects), and importing it would weigh on every
instance's cold start far more than this module does; it also refuses, by default, a
header line longer than 8 KB. So this client was held to what aiohttp passes, rather
than replaced by it. ``bench/http_client.py`` measures the candidates side by side;
``docs/http-client.md`` has the figures.

What a maintained client is trusted for, this one is held to by a conformance suite
run against uvicorn, aiohttp's server, ``http.server``, Node's ``node:http``, a
byte-scripted server and a proxy (tests/unit/test_http_conformance.py):

* the three framings of a body: ``Content-Length``, chunked (extensions and trailers
  too), and close-delimited (neither: the body ends when the connection does, RFC 9112
  §6.3), on HTTP/1.1 as on HTTP/1.0;
* ``Content-Encoding: gzip`` or ``deflate`` decoded as it arrives (for ``WireClient``;
  httpx2 decodes for the SDKs), though none is asked for: a compressed event stream can
  only be late;
* 1xx answers (100, 103) before the final one, passed over; folded header lines
  (obs-fold, which a user agent must take, RFC 9112 §5.2) and large headers, up to
  ``MAX_HEAD`` bytes of head;
* a keep-alive pool per origin (a connection is reused only after its response was
  read to the end and the server allowed it; an idle one is dropped after
  ``IDLE_SECONDS``, before servers usually close theirs), and a request that fails on
  a reused connection before any byte of its answer came sent again once on a new one
  (the server closed it while idle: nothing of an answer was lost);
* the proxy the environment names, as httpx and the SDKs take it: ``HTTPS_PROXY`` (a
  ``CONNECT`` tunnel, the origin's certificate checked through it) and ``HTTP_PROXY``
  (requests in absolute form), or ``ALL_PROXY``, each with its credentials, and
  ``NO_PROXY``; read when a client is made;
* a connect timeout and a read timeout (an answer silent for two minutes fails), with
  one timer per connection, moved by each read, not one per read; a body is passed on
  as it arrives, never held for a buffer to fill;
* cancelling the reader closes the connection (it never returns to the pool).

``WireClient`` adds what the SDKs gave the chat requests: retries with backoff on
connection failures and on 408, 409, 429 and 5xx, honouring ``Retry-After`` up to
``MAX_RETRY_AFTER``, as the OpenAI SDK does; the SDKs keep their own over the
transport. Errors are this module's (``WireStatusError``, ``WireTransportError``); the
adapters turn them into ours, the transport into httpx2's.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import email.utils
import functools
import json
import random
import ssl
import time
import urllib.request
import zlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import httptools

READ_TIMEOUT_SECONDS = 120.0
CONNECT_TIMEOUT_SECONDS = 10.0
IDLE_SECONDS = 30.0
MAX_IDLE = 100
"""Idle connections kept per origin (the SDKs' own ``max_keepalive_connections``)."""
MAX_HEAD = 1 << 20
"""Bytes of an answer's status line and headers taken before it is refused."""
MAX_RETRY_AFTER = 60.0
RETRY_STATUSES = frozenset({408, 409, 429})
_ERROR_BODY_LIMIT = 65536
_PAUSE_AT = 1 << 20  # bytes buffered before the socket's reading is paused
_NO_BODY = frozenset({204, 304})


class WireError(Exception):
    """A provider request that failed (the adapter makes it one of ours)."""


class WireTransportError(WireError):
    """The connection could not be made, or broke, or went silent too long."""


class WireConnectError(WireTransportError):
    """No connection to the origin (or through its proxy) could be made."""


class WireTimeout(WireTransportError):
    """Nothing arrived for the read timeout, or the connection took too long to open."""


class WireConnectTimeout(WireTimeout, WireConnectError):
    """The connection took longer than the connect timeout to open."""


class WireStatusError(WireError):
    """The provider answered with an error status; ``message`` is what it said."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one TLS context of the process's provider connections (ours and the SDKs'):
    making one loads the system's trust store (bench/cold_start.py)."""
    from certifi import where as ca_bundle

    context = ssl.create_default_context(cafile=ca_bundle())
    context.set_alpn_protocols(["http/1.1"])
    return context


class _Connection(asyncio.Protocol):
    """One socket: its response's status, headers and body chunks as they arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float) -> None:
        self._loop = loop
        self.read_timeout = read_timeout
        self._transport: asyncio.Transport | None = None
        self._parser = self._new_parser()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._failure: Exception | None = None
        self._head_size = 0
        self._interim = False  # the message being parsed is a 1xx answer
        self._until_close = False  # its body ends when the connection does
        self.status = 0
        self.headers: dict[str, str] = {}
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.headed = False
        self.complete = False
        self.keep_alive = False
        self.received = False
        self.idle_since = 0.0

    def _new_parser(self) -> httptools.HttpResponseParser:
        parser = httptools.HttpResponseParser(self)
        # Folded header lines: a user agent replaces them with spaces (RFC 9112 §5.2);
        # llhttp refuses them unless its header checks are lenient. An answer's header
        # values are read, never sent on.
        parser.set_dangerous_leniencies(lenient_headers=True)
        return parser

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio's: no isinstance check.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        if not self.headed:
            self._head_size += len(data)
            if self._head_size > MAX_HEAD:
                self._fail(WireTransportError(f"an answer's head over {MAX_HEAD} bytes"))
                self.close()
                return
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
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if self.complete:
            return
        if self._until_close and (exc is None or isinstance(exc, ssl.SSLEOFError)):
            # The end of a close-delimited body (RFC 9112 §6.3) is the end of the
            # connection; a TLS peer that closed without close_notify ended it too.
            self.complete = True
            self._wake()
            return
        self._fail(WireTransportError(f"the connection closed: {exc!r}"))

    def pause_writing(self) -> None:
        self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # 100 Continue, 103 Early Hints: passed over
            self._interim = True
            self.headers, self.raw_headers = {}, []
            return
        self.status = status
        self.keep_alive = self._parser.should_keep_alive()
        coding = self.headers.get("transfer-encoding", "")
        self._until_close = (
            "content-length" not in self.headers
            and not coding.lower().rstrip().endswith("chunked")
            and status not in _NO_BODY
        )
        self.headed = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
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
        self._parser = self._new_parser()
        self.status, self.headers, self.raw_headers = 0, {}, []
        self.headed = self.complete = self._interim = self._until_close = False
        self.keep_alive = self.received = False
        self._head_size = 0
        self._chunks.clear()
        self._buffered = 0
        if self._transport is None:
            raise WireTransportError("the connection closed")
        self._transport.write(request)

    def send_more(self, data: bytes) -> None:
        """Write more of the request (its body, after its head)."""
        if self._transport is None:
            raise self._failure or WireTransportError("the connection closed")
        self._transport.write(data)

    async def drain(self) -> None:
        """Wait until the socket takes more (after a large write)."""
        if self._writable is not None:
            await self._writable
        if self._transport is None and self._failure is not None:
            raise self._failure

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

    def close(self) -> None:
        self.keep_alive = False
        self._until_close = False  # closed by us: its end is not the body's
        if self._transport is not None:
            self._transport.close()

    async def _wait(self) -> None:
        if self._failure is not None:
            raise self._failure
        self._waiter = self._loop.create_future()
        # One timer per connection: a read moves the deadline; the timer, when it fires
        # early, re-arms itself for the deadline it then finds.
        self._deadline = self._loop.time() + self.read_timeout
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
        self._waiter.set_exception(WireTimeout(f"nothing arrived for {self.read_timeout:g} s"))
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


class _Tunnel(asyncio.Protocol):
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
        self._idle: collections.deque[_Connection] = collections.deque()
        # Through a proxy, a plain request names its origin (absolute form) and brings
        # the proxy's credentials; a tunnelled one is the origin's business alone.
        forwarded = self.proxy is not None and not self.tls
        self.target = f"http://{self.authority}" if forwarded else ""
        credentials = forwarded and self.proxy is not None and self.proxy.authorization
        self.proxy_headers = f"Proxy-Authorization: {credentials}\r\n" if credentials else ""

    async def exchange(self, request: bytes, read_timeout: float, body: bytes = b"") -> _Connection:
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

    async def _send(self, connection: _Connection, request: bytes, body: bytes) -> _Connection:
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

    def _reused(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()  # the most recently used: the likeliest alive
            if connection.usable and now - connection.idle_since < IDLE_SECONDS:
                return connection
            connection.close()
        return None

    async def _connect(self, read_timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        context = (self._context or tls_context()) if self.tls else None
        proxy = self.proxy
        if proxy is not None and proxy.scheme != "http":
            raise WireConnectError(f"a proxy is reached over http:// only, not {proxy.scheme}://")
        try:
            async with asyncio.timeout(self.connect_timeout):
                if proxy is None:
                    _, connection = await loop.create_connection(
                        lambda: _Connection(loop, read_timeout),
                        self.host,
                        self.port,
                        ssl=context,
                        server_hostname=self.host if context else None,
                    )
                elif context is None:
                    _, connection = await loop.create_connection(
                        lambda: _Connection(loop, read_timeout), proxy.host, proxy.port
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
    ) -> _Connection:
        """A TLS connection to the origin through a ``CONNECT`` tunnel of ``proxy``."""
        raw, tunnel = await loop.create_connection(lambda: _Tunnel(loop), proxy.host, proxy.port)
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
            connection = _Connection(loop, read_timeout)
            tls = await loop.start_tls(raw, connection, context, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise
        if tls is None:
            raise WireConnectError("the tunnel closed during the TLS handshake")
        connection.connection_made(tls)
        return connection

    def release(self, connection: _Connection) -> None:
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


class _Decoder:
    """A ``gzip`` or ``deflate`` body decoded piece by piece (``deflate`` as zlib's
    container or, as some servers send it, raw)."""

    def __init__(self, coding: str) -> None:
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise WireTransportError(f"an answer in an encoding never asked for: {coding}")
        self._deflate = coding == "deflate"
        self._inflate = zlib.decompressobj(47 if not self._deflate else 15)
        self._started = False

    def decode(self, data: bytes) -> bytes:
        try:
            if self._deflate and not self._started:
                self._started = True
                try:
                    return self._inflate.decompress(data)
                except zlib.error:
                    self._inflate = zlib.decompressobj(-15)
            return self._inflate.decompress(data)
        except zlib.error as exc:
            raise WireTransportError(f"a body that does not decode: {exc}") from exc

    def flush(self) -> bytes:
        return self._inflate.flush()


async def decoded(connection: _Connection) -> AsyncIterator[bytes]:
    """The body of ``connection``'s answer as it arrives, decoded if it came encoded."""
    coding = connection.headers.get("content-encoding", "identity").strip().lower()
    if coding == "identity":
        while (chunk := await connection.next_chunk()) is not None:
            yield chunk
        return
    decoder = _Decoder(coding)
    while (chunk := await connection.next_chunk()) is not None:
        if data := decoder.decode(chunk):
            yield data
    if tail := decoder.flush():
        yield tail


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
        port = parts.port or (443 if parts.scheme == "https" else 80)
        self._pool = Pool(
            parts.scheme, parts.hostname, port, context=context, connect_timeout=connect_timeout
        )
        self._prefix = self._pool.target + parts.path.rstrip("/")
        fixed = {"Host": self._pool.authority, "User-Agent": "spark-agent", **headers}
        head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()) + self._pool.proxy_headers
        self._head = head.encode("latin-1")
        self._max_retries = max_retries
        self._read_timeout = read_timeout

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
            yield decoded(connection)
        finally:
            self._pool.release(connection)

    async def _answered(self, request: bytes) -> _Connection:
        """A connection whose answer to ``request`` has a 2xx status (its headers read)."""
        attempt = 0
        while True:
            wait: float | None
            try:
                connection = await self._pool.exchange(request, self._read_timeout)
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
                        message = _error_message(await _body(connection, _ERROR_BODY_LIMIT))
                    except WireError:
                        message = "no detail"
                    finally:
                        self._pool.release(connection)
                    raise WireStatusError(status, message)
                wait = _retry_after(connection.headers)
                connection.close()
            await asyncio.sleep(backoff(attempt, wait))
            attempt += 1

    async def aclose(self) -> None:
        await self._pool.aclose()


async def _body(connection: _Connection, limit: int) -> bytes:
    """The rest of the answer's body, decoded, at most ``limit`` bytes of it."""
    parts: list[bytes] = []
    size = 0
    async for chunk in decoded(connection):
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]
