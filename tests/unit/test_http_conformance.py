"""The provider HTTP client's conformance suite: what a maintained HTTP/1.1 client passes,
asked of ours, against real servers of several kinds on loopback.

Every provider call goes through ``shared/llm/wire/``'s connections, by two doors:

* ``chat``: ``WireClient.stream``, the adapters' streamed chat replies;
* ``sdk``: the ``httpx2`` client the SDKs are given (``transport.http_client``: OpenAI's
  audio and live-audio secrets, Gemini's transcription and speech), read as the SDKs read
  it (``aiter_bytes``: decoded).

Both are run against uvicorn, aiohttp's web server, Python's ``http.server`` and Node's
``node:http`` (tests/fakes/http_servers.py: the framing each can send, gzip, keep-alive
and its own idle timeout, a trickled and a stalled body, a 60 KB header), and against a
raw asyncio server scripted byte by byte for what no framework sends on request
(close-delimited bodies on a kept-alive protocol, 100 and 103 before the answer, folded
headers, a kept-alive connection closed under a request, statuses and ``Retry-After``),
and through a loopback proxy named by ``HTTP_PROXY`` / ``HTTPS_PROXY`` (``NO_PROXY``
honoured).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from shared.errors import ProviderRateLimited, ProviderRejected, ProviderUnavailable
from shared.llm import openai as openai_adapter
from shared.llm import transport
from shared.llm.wire import WireClient, WireError, WireStatusError
from tests.fakes import http_servers
from tests.fakes.keys import key_and_cert, pem_key

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy in the machine's environment would take the loopback requests; the
    proxy cases set their own."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@dataclass
class Got:
    """A reply's body as it arrived, chunk by chunk."""

    chunks: list[bytes] = field(default_factory=list)
    hold: Path | None = None
    """Made when a piece has arrived: the server's ``hold`` (tests/fakes/http_servers.py)."""
    headers: dict[str, str] = field(default_factory=dict)

    def arrived(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        if self.hold is not None:
            self.hold.touch()

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def port(self) -> int:
        """The client's port as the server saw it (tests/fakes/http_servers.py)."""
        return int(self.body.split(b" ")[1])


class Door:
    """One way into the client stack (``chat`` or ``sdk``), made for one origin."""

    name = ""

    async def fetch(self, path: str, got: Got | None = None) -> Got:
        raise NotImplementedError

    def translate(self, exc: Exception) -> Exception:
        raise NotImplementedError

    failures: tuple[type[Exception], ...] = ()

    async def aclose(self) -> None:
        raise NotImplementedError


class ChatDoor(Door):
    name = "chat"
    failures = (WireError,)

    def __init__(
        self, base: str, read_timeout: float, retries: int, context: ssl.SSLContext | None
    ) -> None:
        self.client = WireClient(
            base,
            {"Authorization": "Bearer k"},
            retries,
            read_timeout=read_timeout,
            connect_timeout=5,
            context=context,
        )

    async def fetch(self, path: str, got: Got | None = None) -> Got:
        got = got if got is not None else Got()
        async with self.client.stream(path, {"q": "é"}) as chunks:
            async for chunk in chunks:
                got.arrived(chunk)
        return got

    def translate(self, exc: Exception) -> Exception:
        return openai_adapter.translate_error(exc)

    async def aclose(self) -> None:
        await self.client.aclose()


class SdkDoor(Door):
    name = "sdk"

    def __init__(
        self, base: str, read_timeout: float, retries: int, context: ssl.SSLContext | None
    ) -> None:
        self.base = base
        timeout = httpx2.Timeout(read_timeout, connect=5)
        options: dict[str, Any] = {"context": context} if context is not None else {}
        self.client = transport.http_client(timeout, **options)
        self.failures = openai_adapter.sdk_failures()

    async def fetch(self, path: str, got: Got | None = None) -> Got:
        got = got if got is not None else Got()
        async with self.client.stream("POST", self.base + path, json={"q": "é"}) as response:
            got.headers = dict(response.headers)
            response.raise_for_status()
            async for chunk in response.aiter_bytes():
                got.arrived(chunk)
        return got

    def translate(self, exc: Exception) -> Exception:
        return openai_adapter.translate_error(exc)

    async def aclose(self) -> None:
        await self.client.aclose()


DOORS: dict[str, type[Door]] = {"chat": ChatDoor, "sdk": SdkDoor}


@pytest.fixture(params=sorted(DOORS))
def door_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def door(door_kind: str) -> Callable[..., Door]:
    """Makes doors of this test's kind (each test closes its own on its loop)."""

    def make(
        base: str,
        read_timeout: float = 5.0,
        retries: int = 0,
        context: ssl.SSLContext | None = None,
    ) -> Door:
        return DOORS[door_kind](base, read_timeout, retries, context)

    return make


async def closed(*doors: Door) -> None:
    for each in doors:
        await each.aclose()


def expected(port: int, n: int) -> bytes:
    return b"".join(http_servers.pieces(port, n))


# Real servers ----------------------------------------------------------------------


@pytest.fixture(scope="module", params=sorted(http_servers.SERVERS))
def served(request: pytest.FixtureRequest) -> Iterator[http_servers.Served]:
    with http_servers.SERVERS[request.param]() as server:
        yield server


def needs(server: http_servers.Served, route: str) -> None:
    if route not in server.routes:
        pytest.skip(f"{server.kind} cannot be made to send {route} (see http_servers.py)")


@pytest.mark.parametrize("route", ["/sse", "/length", "/close", "/gzip", "/big"])
async def test_a_body_of_each_framing_arrives_whole(
    served: http_servers.Served, door: Callable[..., Door], route: str
) -> None:
    needs(served, route)
    client = door(served.url)
    got = await client.fetch(f"{route}?n=4")
    assert got.body == expected(got.port, 4)
    if client.name == "sdk" and route == "/big":
        assert got.headers["x-big"] == http_servers.BIG
    await closed(client)


async def test_a_kept_alive_connection_serves_the_next_request(
    served: http_servers.Served, door: Callable[..., Door]
) -> None:
    client = door(served.url)
    first = await client.fetch("/length?n=1")
    second = await client.fetch("/sse?n=2")
    third = await client.fetch("/length?n=1")
    assert first.port == second.port == third.port
    await closed(client)


async def closed_by_the_server(port: int, server: int) -> None:
    """Until the kernel has the server's end of the connection from our ``port`` to its
    ``server`` port (CLOSE_WAIT: its FIN came, and we have not closed ours), however late
    the server's idle timer fired on a busy machine; a net of 30 s for a server that
    never closes."""
    for _ in range(3000):
        if _tcp_state(port, server) in (None, "08"):  # gone, or CLOSE_WAIT (tcp_states.h)
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the server never closed the idle connection from port {port}")


def _tcp_state(port: int, server: int) -> str | None:
    """The state of our socket from ``port`` to ``server`` on loopback, as /proc/net/tcp
    gives it. Both ends name it: once ours is gone, a busy machine may give its port to
    another connection at once, whose state says nothing of ours."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with suppress(FileNotFoundError), open(table) as rows:
            for row in list(rows)[1:]:
                local, remote, state = row.split()[1:4]
                ends = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
                if ends == (port, server):
                    return state
    return None


async def test_a_connection_the_server_closed_when_idle_is_replaced(
    served: http_servers.Served, door: Callable[..., Door]
) -> None:
    client = door(served.url)
    first = await client.fetch("/length?n=1")
    server = int(served.url.rsplit(":", 1)[1])
    await closed_by_the_server(first.port, server)  # its idle timeout passed: it sent its FIN
    second = await client.fetch("/length?n=1")
    assert second.body == expected(second.port, 1)
    assert second.port != first.port
    await closed(client)


@pytest.mark.parametrize("route", ["/sse", "/gzip", "/close"])
async def test_a_slow_body_is_passed_on_as_it_arrives(
    served: http_servers.Served, door: Callable[..., Door], route: str, tmp_path: Path
) -> None:
    needs(served, route)
    client = door(served.url)
    hold = tmp_path / "a-piece-arrived"
    got = await client.fetch(f"{route}?n=3&hold={hold}", Got(hold=hold))
    # The server sent the second piece only once the first had been handed over: a
    # client that waited for the body to end, or for a buffer to fill, would have had
    # the connection closed on it instead, however fast or slow the machine.
    assert got.body == expected(got.port, 3)
    await closed(client)


async def test_a_stalled_body_fails_with_the_read_timeout(
    served: http_servers.Served, door: Callable[..., Door]
) -> None:
    client = door(served.url, read_timeout=0.5)
    got = Got()
    started = time.monotonic()
    with pytest.raises(client.failures) as raised:
        await client.fetch("/stall?n=1", got)
    # Not before the timeout; and the server's stall outlasts any read timeout.
    assert time.monotonic() - started >= 0.5
    assert got.body == expected(got.port, 1)  # what came before the stall was passed on
    assert isinstance(client.translate(raised.value), ProviderUnavailable)
    await closed(client)


# A raw server, scripted byte by byte ------------------------------------------------

Answer = Callable[["Exchange"], Awaitable[bool]]
"""Answers one request; ``False`` closes the connection after it."""


@dataclass
class Exchange:
    head: bytes
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    connection: int  # 1 for the server's first connection
    number: int  # 1 for the connection's first request

    def send(self, data: bytes) -> None:
        self.writer.write(data)


class RawServer:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.heads: list[bytes] = []
        self.url = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection, number = self.connections, 0
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                number += 1
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.heads.append(head)
                if not await self.answer(Exchange(head, reader, writer, connection, number)):
                    break
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def raw(
    answer: Answer, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1"
) -> AsyncIterator[RawServer]:
    server = RawServer(answer)
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    port = listening.sockets[0].getsockname()[1]
    server.url = f"{'https' if tls else 'http'}://{host}:{port}/v1"
    async with listening:
        yield server


SSE = b"data: 1 one\n\ndata: 1 two\n\n"


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


OK_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE[:12], SSE[12:])


async def test_a_close_delimited_body_ends_with_the_connection(
    door: Callable[..., Door],
) -> None:
    # RFC 9112 §6.3: no Content-Length and no chunked coding, on HTTP/1.1 with no
    # "Connection: close" either: the body is whatever comes until the server closes.
    async def answer(exchange: Exchange) -> bool:
        exchange.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        await exchange.writer.drain()
        for piece in (SSE[:12], SSE[12:]):
            await asyncio.sleep(0.05)
            exchange.send(piece)
            await exchange.writer.drain()
        return False

    async with raw(answer) as server:
        client = door(server.url)
        assert (await client.fetch("/chat")).body == SSE
        assert (await client.fetch("/chat")).body == SSE  # on a new connection
        await closed(client)
    assert server.connections == 2


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: %d\r\n\r\n%s" % (len(SSE), SSE),
        b"Transfer-Encoding: chunked\r\n\r\n"
        + b"%x;ext=1\r\n%s\r\n" % (len(SSE[:12]), SSE[:12])
        + b"%X\r\n%s\r\n" % (len(SSE[12:]), SSE[12:])
        + b"0\r\nX-Trailer: t\r\n\r\n",
    ],
    ids=["content-length", "chunked-extensions-trailers"],
)
async def test_a_framed_body_leaves_the_connection_for_the_next_request(
    door: Callable[..., Door], framing: bytes
) -> None:
    async def answer(exchange: Exchange) -> bool:
        exchange.send(b"HTTP/1.1 200 OK\r\n" + framing)
        return True

    async with raw(answer) as server:
        client = door(server.url)
        assert (await client.fetch("/chat")).body == SSE
        assert (await client.fetch("/chat")).body == SSE
        await closed(client)
    assert server.connections == 1


async def test_informational_answers_before_the_final_one_are_passed_over(
    door: Callable[..., Door],
) -> None:
    async def answer(exchange: Exchange) -> bool:
        exchange.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        await exchange.writer.drain()
        await asyncio.sleep(0.02)
        exchange.send(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
        exchange.send(OK_CHUNKED)
        return True

    async with raw(answer) as server:
        client = door(server.url)
        assert (await client.fetch("/chat")).body == SSE
        assert (await client.fetch("/chat")).body == SSE
        await closed(client)
    assert server.connections == 1


async def test_folded_and_large_headers_are_read(door: Callable[..., Door]) -> None:
    big = b"b" * 60_000

    async def answer(exchange: Exchange) -> bool:
        exchange.send(
            b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n  two\r\n\tthree\r\nX-Big: "
            + big
            + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
        )
        return True

    async with raw(answer) as server:
        client = door(server.url)
        got = await client.fetch("/chat")
        assert got.body == SSE
        if client.name == "sdk":
            assert got.headers["x-big"] == big.decode()
            assert got.headers["x-folded"].split() == ["one", "two", "three"]
        await closed(client)


async def test_a_kept_alive_connection_closed_under_a_request_is_replaced(
    door: Callable[..., Door],
) -> None:
    # The server promised keep-alive but closes the connection as the next request
    # arrives on it, answering nothing: the request is sent again on a new connection
    # (nothing of an answer was received, so nothing was lost).
    async def answer(exchange: Exchange) -> bool:
        if exchange.number == 2:
            return False
        exchange.send(OK_CHUNKED)
        return True

    async with raw(answer) as server:
        client = door(server.url)
        assert (await client.fetch("/chat")).body == SSE
        assert (await client.fetch("/chat")).body == SSE
        await closed(client)
    assert server.connections == 2
    assert len(server.heads) == 3


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n" + SSE,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nc\r\n" + SSE[:12] + b"\r\n",
    ],
    ids=["content-length", "chunked"],
)
async def test_a_body_cut_off_is_a_transport_failure(
    door: Callable[..., Door], answer: bytes
) -> None:
    async def answering(exchange: Exchange) -> bool:
        exchange.send(answer)
        await exchange.writer.drain()
        return False

    async with raw(answering) as server:
        client = door(server.url)
        with pytest.raises(client.failures) as raised:
            await client.fetch("/chat")
        assert isinstance(client.translate(raised.value), ProviderUnavailable)
        await closed(client)


async def test_a_stalled_head_fails_with_the_read_timeout(door: Callable[..., Door]) -> None:
    async def answer(exchange: Exchange) -> bool:
        await asyncio.sleep(http_servers.STALL_SECONDS)  # outlasts any read timeout
        return False

    async with raw(answer) as server:
        client = door(server.url, read_timeout=0.3)
        started = time.monotonic()
        with pytest.raises(client.failures) as raised:
            await client.fetch("/chat")
        assert time.monotonic() - started >= 0.3
        assert isinstance(client.translate(raised.value), ProviderUnavailable)
        await closed(client)


async def test_a_stalled_close_delimited_body_is_a_timeout_not_its_end(
    door: Callable[..., Door],
) -> None:
    # The read timeout closes the connection: that end is ours, not the body's.
    async def answer(exchange: Exchange) -> bool:
        exchange.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + SSE[:13])
        await asyncio.sleep(http_servers.STALL_SECONDS)
        return False

    async with raw(answer) as server:
        client = door(server.url, read_timeout=0.3)
        got = Got()
        with pytest.raises(client.failures) as raised:
            await client.fetch("/chat", got)
        assert got.body == SSE[:13]
        assert isinstance(client.translate(raised.value), ProviderUnavailable)
        await closed(client)


# Statuses: the chat door's own retries (the SDKs retry for themselves) -------------------


async def test_an_error_status_is_raised_with_the_providers_message_and_not_retried() -> None:
    async def answer(exchange: Exchange) -> bool:
        body = b'{"error": {"message": "bad model"}}'
        exchange.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        return True

    async with raw(answer) as server:
        client = ChatDoor(server.url, 5, 2, None)
        with pytest.raises(WireStatusError) as raised:
            await client.fetch("/chat")
        await client.aclose()
    assert (raised.value.status, raised.value.message) == (400, "bad model")
    assert isinstance(client.translate(raised.value), ProviderRejected)
    assert len(server.heads) == 1


async def test_a_busy_provider_is_asked_again_after_the_wait_it_names() -> None:
    statuses = [b"429 Too Many Requests", b"503 Service Unavailable"]
    asked: list[float] = []

    async def answer(exchange: Exchange) -> bool:
        asked.append(time.monotonic())
        if statuses:
            status = statuses.pop(0)
            exchange.send(b"HTTP/1.1 %s\r\nRetry-After: 0.3\r\nContent-Length: 0\r\n\r\n" % status)
            return True
        exchange.send(OK_CHUNKED)
        return True

    async with raw(answer) as server:
        client = ChatDoor(server.url, 5, 2, None)
        assert (await client.fetch("/chat")).body == SSE
        await client.aclose()
    assert len(asked) == 3
    assert asked[1] - asked[0] >= 0.29 and asked[2] - asked[1] >= 0.29


async def test_retries_end_with_the_last_status() -> None:
    async def answer(exchange: Exchange) -> bool:
        body = b'{"error": {"message": "slow down"}}'
        head = b"HTTP/1.1 429 Busy\r\nretry-after-ms: 10\r\nContent-Length: %d\r\n\r\n"
        exchange.send(head % len(body) + body)
        return True

    async with raw(answer) as server:
        client = ChatDoor(server.url, 5, 1, None)
        with pytest.raises(WireStatusError) as raised:
            await client.fetch("/chat")
        await client.aclose()
    assert (raised.value.status, raised.value.message) == (429, "slow down")
    assert isinstance(client.translate(raised.value), ProviderRateLimited)
    assert len(server.heads) == 2


async def test_the_sdk_door_hands_statuses_to_the_sdk_which_retries_them() -> None:
    # What the OpenAI SDK's audio requests see: its own retries, on our transport.
    from openai import AsyncOpenAI

    statuses = [b"429 Too Many Requests"]

    async def answer(exchange: Exchange) -> bool:
        if statuses:
            status = statuses.pop(0)
            exchange.send(
                b"HTTP/1.1 %s\r\nretry-after-ms: 10\r\nContent-Length: 0\r\n\r\n" % status
            )
            return True
        exchange.send(
            b"HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\n" + b"Content-Length: 4\r\n\r\nID3x"
        )
        return True

    async with raw(answer) as server:
        timeout = httpx2.Timeout(5, connect=5)
        sdk = AsyncOpenAI(
            api_key="k",
            base_url=server.url,
            max_retries=1,
            http_client=transport.http_client(timeout),
        )
        async with sdk.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="hi"
        ) as response:
            audio = b"".join([chunk async for chunk in response.iter_bytes()])
        await sdk.close()
    assert audio == b"ID3x"
    assert len(server.heads) == 2


# Proxies from the environment ------------------------------------------------------


class Proxy:
    """A loopback proxy: CONNECT tunnels, and requests in absolute form forwarded."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.url = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()
            return
        self.heads.append(head)
        method, target, _ = head.split(b"\r\n")[0].split(b" ")
        if method == b"CONNECT":
            host, port = target.rsplit(b":", 1)
        else:  # http://host:port/path
            host, port = target.split(b"/")[2].rsplit(b":", 1)
        up_reader, up_writer = await asyncio.open_connection(host.decode(), int(port))
        if method == b"CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            up_writer.write(head)  # origin servers take the absolute form (RFC 9112 §3.2.2)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@asynccontextmanager
async def proxy() -> AsyncIterator[Proxy]:
    server = Proxy()
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.url = f"http://user:secret@127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    async with listening:
        yield server


def tls_pair(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for ``localhost`` and a client context trusting it alone."""
    key, pem = key_and_cert("localhost", hosts=("localhost", "127.0.0.1"))
    cert, private = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text(pem)
    private.write_bytes(pem_key(key))
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, private)
    return served, ssl.create_default_context(cafile=str(cert))


async def keep_alive(exchange: Exchange) -> bool:
    exchange.send(OK_CHUNKED)
    return True


async def test_http_proxy_from_the_environment_forwards_in_absolute_form(
    door: Callable[..., Door], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with raw(keep_alive) as server, proxy() as through:
        monkeypatch.setenv("HTTP_PROXY", through.url)
        client = door(server.url)
        assert (await client.fetch("/chat")).body == SSE
        assert (await client.fetch("/chat")).body == SSE
        await closed(client)
    assert len(through.heads) == 1  # one connection to the proxy, kept alive
    line = through.heads[0].split(b"\r\n")[0]
    assert line == f"POST {server.url}/chat HTTP/1.1".encode()
    assert b"\r\nProxy-Authorization: Basic dXNlcjpzZWNyZXQ=\r\n" in through.heads[0]


async def test_https_proxy_from_the_environment_tunnels_and_checks_the_origin(
    door: Callable[..., Door], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tls, trusting = tls_pair(tmp_path)
    async with raw(keep_alive, tls=tls, host="localhost") as server, proxy() as through:
        monkeypatch.setenv("HTTPS_PROXY", through.url)
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # not for https
        client = door(server.url, context=trusting)
        assert (await client.fetch("/chat")).body == SSE
        assert (await client.fetch("/chat")).body == SSE
        await closed(client)
    assert server.connections == 1
    assert len(through.heads) == 1
    port = server.url.split(":")[2].split("/")[0]
    assert through.heads[0].startswith(f"CONNECT localhost:{port} HTTP/1.1\r\n".encode())
    assert b"\r\nProxy-Authorization: Basic dXNlcjpzZWNyZXQ=\r\n" in through.heads[0]


async def test_no_proxy_names_the_hosts_reached_directly(
    door: Callable[..., Door], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with raw(keep_alive) as server, proxy() as through:
        monkeypatch.setenv("HTTP_PROXY", through.url)
        monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.1")
        client = door(server.url)
        assert (await client.fetch("/chat")).body == SSE
        await closed(client)
    assert through.heads == []


async def test_a_proxy_that_refuses_is_a_transport_failure(
    door: Callable[..., Door], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async def refusing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    _, trusting = tls_pair(tmp_path)
    listening = await asyncio.start_server(refusing, "127.0.0.1", 0)
    async with listening:
        monkeypatch.setenv(
            "HTTPS_PROXY", f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
        )
        client = door("https://localhost:9/v1", context=trusting)
        with pytest.raises(client.failures) as raised:
            await client.fetch("/chat")
        assert isinstance(client.translate(raised.value), ProviderUnavailable)
        assert "407" in str(raised.value)
        await closed(client)


def test_gzip_pieces_flushed_apart_decode_apart() -> None:
    # The servers' gzip streams flush each piece (Z_SYNC_FLUSH): a client that decodes
    # as bytes come can pass each piece on before the next is sent.
    packer = http_servers.gzip_stream()
    first = packer.compress(b"data: 1\n\n") + packer.flush(zlib.Z_SYNC_FLUSH)
    assert zlib.decompressobj(31).decompress(first) == b"data: 1\n\n"


def test_the_tunnel_and_the_framings_hold_on_uvloop(
    door_kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The functions serve on uvloop, whose start_tls and transports are not asyncio's.
    import uvloop

    def door(
        base: str,
        read_timeout: float = 5.0,
        retries: int = 0,
        context: ssl.SSLContext | None = None,
    ) -> Door:
        return DOORS[door_kind](base, read_timeout, retries, context)

    async def cases() -> None:
        await test_https_proxy_from_the_environment_tunnels_and_checks_the_origin(
            door, monkeypatch, tmp_path
        )
        monkeypatch.delenv("HTTPS_PROXY")
        monkeypatch.delenv("HTTP_PROXY")
        await test_a_close_delimited_body_ends_with_the_connection(door)
        await test_informational_answers_before_the_final_one_are_passed_over(door)

    uvloop.run(cases())
