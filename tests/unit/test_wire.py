"""``wire``, the chat requests' HTTP/1.1 client, against real servers on loopback."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from shared.llm import wire
from shared.llm.wire import WireClient, WireStatusError, WireTimeout, WireTransportError
from shared.llm.wire.proxy import Proxy, proxy_for
from tests.fakes.keys import key_and_cert, pem_key

Reader, Writer = asyncio.StreamReader, asyncio.StreamWriter
Answer = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request (its head and reader); ``False`` closes the connection after."""


class Server:
    """A loopback HTTP server whose answers the test writes byte by byte."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                if not await self.answer(head, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def serving(answer: Answer, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server(answer)
    listening = await asyncio.start_server(server._handle, "127.0.0.1", 0, ssl=tls)
    server.port = listening.sockets[0].getsockname()[1]
    async with listening:
        yield server


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


async def sse(head: bytes, reader: Reader, writer: Writer) -> bool:
    writer.write(SSE_HEAD + chunked(b"data: one\n\n", b"data: two\n\n"))
    await writer.drain()
    return True


def client(server: Server, **options: object) -> WireClient:
    return WireClient(
        f"http://127.0.0.1:{server.port}/v1",
        {"Authorization": "Bearer k"},
        **options,  # type: ignore[arg-type]
    )


async def read(c: WireClient, path: str = "/chat") -> bytes:
    async with c.stream(path, {"q": "é"}) as chunks:
        return b"".join([chunk async for chunk in chunks])


async def test_a_chunked_body_streams_and_its_connection_serves_the_next_request() -> None:
    async with serving(sse) as server:
        c = client(server)
        assert await read(c) == b"data: one\n\ndata: two\n\n"
        assert await read(c) == b"data: one\n\ndata: two\n\n"
        await c.aclose()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in first
    assert b"\r\nContent-Type: application/json\r\n" in first
    assert first.endswith('{"q":"é"}'.encode())


@pytest.mark.parametrize(
    ("answer", "connections"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 2),
    ],
    ids=["content-length", "connection-close"],
)
async def test_a_content_length_body_is_read_and_close_is_honoured(
    answer: bytes, connections: int
) -> None:
    async def answering(head: bytes, reader: Reader, writer: Writer) -> bool:
        writer.write(answer)
        return connections == 1

    async with serving(answering) as server:
        c = client(server)
        assert await read(c) == b"ok"
        assert await read(c) == b"ok"
    assert server.connections == connections


async def test_an_idle_connection_the_server_closed_is_replaced_without_an_error() -> None:
    async def answer(head: bytes, reader: Reader, writer: Writer) -> bool:
        writer.write(SSE_HEAD + chunked(b"data: x\n\n"))
        await writer.drain()
        return False  # keep-alive was promised, but the server closes it once idle

    async with serving(answer) as server:
        c = client(server, max_retries=0)
        assert await read(c) == b"data: x\n\n"
        await asyncio.sleep(0.05)
        assert await read(c) == b"data: x\n\n"
    assert server.connections == 2


async def test_an_error_status_is_raised_with_the_providers_message_and_not_retried() -> None:
    async def answer(head: bytes, reader: Reader, writer: Writer) -> bool:
        body = b'{"error": {"message": "bad model"}}'
        head = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % len(body)
        writer.write(head + body)
        return True

    async with serving(answer) as server:
        with pytest.raises(WireStatusError) as raised:
            await read(client(server, max_retries=2))
    assert (raised.value.status, raised.value.message) == (400, "bad model")
    assert len(server.requests) == 1


async def test_a_busy_provider_is_asked_again_after_the_wait_it_names() -> None:
    statuses = [b"429 Too Many Requests", b"503 Service Unavailable"]

    async def answer(head: bytes, reader: Reader, writer: Writer) -> bool:
        if statuses:
            status = statuses.pop(0)
            writer.write(b"HTTP/1.1 %s\r\nretry-after-ms: 10\r\nContent-Length: 0\r\n\r\n" % status)
            return True
        return await sse(head, reader, writer)

    async with serving(answer) as server:
        assert await read(client(server, max_retries=2)) == b"data: one\n\ndata: two\n\n"
    assert len(server.requests) == 3


async def test_retries_end_with_the_last_status() -> None:
    async def answer(head: bytes, reader: Reader, writer: Writer) -> bool:
        writer.write(b"HTTP/1.1 503 Busy\r\nRetry-After: 0\r\nContent-Length: 0\r\n\r\n")
        return True

    async with serving(answer) as server:
        with pytest.raises(WireStatusError) as raised:
            await read(client(server, max_retries=1))
    assert raised.value.status == 503
    assert len(server.requests) == 2


def test_retry_after_is_honoured_only_within_its_cap() -> None:
    assert wire.backoff(0, wire._retry_after({"retry-after": "2"})) == 2
    assert wire.backoff(0, wire._retry_after({"retry-after-ms": "250"})) == 0.25
    assert 0.375 <= wire.backoff(0, wire._retry_after({"retry-after": "3600"})) <= 0.5
    assert 6 <= wire.backoff(9, wire._retry_after({"retry-after": "soon"})) <= 8


async def test_a_silent_provider_times_out_and_its_connection_is_dropped() -> None:
    async def answer(head: bytes, reader: Reader, writer: Writer) -> bool:
        writer.write(SSE_HEAD + b"9\r\ndata: x\n\n\r\n")  # one chunk, then nothing
        await asyncio.sleep(30)  # longer than any read timeout could be late
        return False

    async with serving(answer) as server:
        c = client(server, read_timeout=0.3, max_retries=0)
        got = []
        with pytest.raises(WireTimeout):
            async with c.stream("/chat", {}) as chunks:
                async for chunk in chunks:
                    got.append(chunk)
        assert got == [b"data: x\n\n"]
        assert not c._pool._idle


async def test_reads_that_keep_coming_never_time_out() -> None:
    async def answer(head: bytes, reader: Reader, writer: Writer) -> bool:
        writer.write(SSE_HEAD)
        for _ in range(8):  # 0.4 s in all, against a 0.2 s timeout
            writer.write(b"9\r\ndata: x\n\n\r\n")
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")
        return True

    async with serving(answer) as server:
        assert await read(client(server, read_timeout=0.2)) == b"data: x\n\n" * 8


async def test_a_body_cut_off_is_a_transport_error() -> None:
    async def answer(head: bytes, reader: Reader, writer: Writer) -> bool:
        writer.write(SSE_HEAD + b"9\r\ndata: x\n\n\r\n")
        await writer.drain()
        return False  # closed before the last chunk

    async with serving(answer) as server:
        with pytest.raises(WireTransportError):
            await read(client(server, max_retries=0))


async def test_a_reader_that_stops_early_closes_the_connection() -> None:
    first_sent = asyncio.Event()

    async def answer(head: bytes, reader: Reader, writer: Writer) -> bool:
        writer.write(SSE_HEAD + b"9\r\ndata: x\n\n\r\n")
        await writer.drain()
        if not first_sent.is_set():  # the first answer's end never comes in time
            first_sent.set()
            await asyncio.sleep(30)
        writer.write(b"0\r\n\r\n")
        return True

    async with serving(answer) as server:
        c = client(server)
        task = asyncio.create_task(read(c))
        await first_sent.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not c._pool._idle  # its rest unread: never handed to the next request
        assert await read(c) == b"data: x\n\n"
    assert server.connections == 2


async def test_no_server_is_a_transport_error() -> None:
    async with serving(sse) as server:
        port = server.port
    c = WireClient(f"http://127.0.0.1:{port}", {}, max_retries=0)
    with pytest.raises(WireTransportError):
        await read(c)


def test_it_runs_on_uvloop_as_the_functions_do() -> None:
    # uvicorn serves on uvloop, whose transports are not asyncio's classes.
    import uvloop

    async def twice() -> list[bytes]:
        async with serving(sse) as server:
            c = client(server)
            return [await read(c), await read(c)]

    assert uvloop.run(twice()) == [b"data: one\n\ndata: two\n\n"] * 2


def test_only_http_urls_are_taken() -> None:
    with pytest.raises(ValueError, match="not an http"):
        WireClient("ftp://example.com", {})


async def test_https_checks_the_servers_certificate_and_name(tmp_path: Path) -> None:
    key, pem = key_and_cert("localhost", hosts=("localhost", "127.0.0.1"))
    cert, private = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text(pem)
    private.write_bytes(pem_key(key))
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, private)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with serving(sse, tls=served) as server:
        url = f"https://localhost:{server.port}/v1"
        c = WireClient(url, {}, max_retries=0, context=trusting)
        assert await read(c) == b"data: one\n\ndata: two\n\n"
        assert await read(c) == b"data: one\n\ndata: two\n\n"
        assert server.connections == 1
        # The process's own trust store does not know this certificate: refused.
        with pytest.raises(WireTransportError):
            await read(WireClient(url, {}, max_retries=0))


@pytest.mark.parametrize(
    ("host", "no_proxy", "bypassed"),
    [
        ("api.openai.com", "openai.com", True),
        ("api.openai.com", ".openai.com", True),
        ("notopenai.com", "openai.com", False),
        ("127.0.0.1", "localhost, 127.0.0.1", True),
        ("anything", "*", True),
        ("openai.com", "openai.com:443", True),
        ("::1", "[::1]:8080", True),
        ("anything", "", False),
    ],
)
def test_no_proxy_names_hosts_and_their_domains(
    host: str, no_proxy: str, bypassed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    assert (proxy_for("https", host) is None) is bypassed


def test_the_proxy_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert proxy_for("https", "api.openai.com") is None
    monkeypatch.setenv("ALL_PROXY", "proxy.internal:3128")
    assert proxy_for("https", "api.openai.com") == Proxy("http", "proxy.internal", 3128, None)
    monkeypatch.setenv("HTTPS_PROXY", "http://u%40x:p%3Aw@upper:8080")
    monkeypatch.setenv("https_proxy", "http://u%40x:p%3Aw@lower:8080")  # lower case first
    proxy = proxy_for("https", "api.openai.com")
    assert proxy is not None and proxy.host == "lower"
    assert proxy.authorization == "Basic " + base64.b64encode(b"u@x:p:w").decode()
    monkeypatch.setenv("no_proxy", "openai.com")
    assert proxy_for("https", "api.openai.com") is None
