"""One connection: an ``asyncio.Protocol`` whose bytes go straight to httptools' C parser
(llhttp), with one timer per connection moved by each read, and a reader that waits on
one future per socket read."""

from __future__ import annotations

import asyncio
import collections
import ssl
from typing import cast

import httptools

from shared.llm.wire.errors import WireTimeout, WireTransportError

READ_TIMEOUT_SECONDS = 120.0


MAX_HEAD = 1 << 20
"""Bytes of an answer's status line and headers taken before it is refused."""


_PAUSE_AT = 1 << 20  # bytes buffered before the socket's reading is paused


_NO_BODY = frozenset({204, 304})


class Connection(asyncio.Protocol):
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
