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

One module a layer: ``connection`` (a socket and its parser), ``pool`` (an origin's
connections), ``proxy`` (the environment's proxy and the tunnel), ``decoding`` (an
encoded body), ``errors``; the client and its retries are here.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

from shared.llm.wire.connection import READ_TIMEOUT_SECONDS, Connection
from shared.llm.wire.decoding import decoded, read_body
from shared.llm.wire.errors import (
    WireConnectError,
    WireConnectTimeout,
    WireError,
    WireStatusError,
    WireTimeout,
    WireTransportError,
)
from shared.llm.wire.pool import CONNECT_TIMEOUT_SECONDS, Pool

# The client's errors, imported from here by the adapters and the transport.
__all__ = [
    "WireClient",
    "WireConnectError",
    "WireConnectTimeout",
    "WireError",
    "WireStatusError",
    "WireTimeout",
    "WireTransportError",
    "backoff",
    "encode_json",
]


MAX_RETRY_AFTER = 60.0


RETRY_STATUSES = frozenset({408, 409, 429})


_ERROR_BODY_LIMIT = 65536


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

    async def _answered(self, request: bytes) -> Connection:
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
                        message = _error_message(await read_body(connection, _ERROR_BODY_LIMIT))
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
