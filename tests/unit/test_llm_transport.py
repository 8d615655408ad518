"""The model SDKs' HTTP client (``shared/llm/transport.py``): httpx2's API over
``wire``'s pools. (What every provider request must do is asked of it, and of the
chat requests' client, in tests/unit/test_http_conformance.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2
import pytest

from shared.llm.transport import WireTransport, http_client

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def paced(pieces: list[bytes], pause: float) -> Handler:
    """An HTTP/1.1 server that answers each request on a connection with a chunked body
    in ``pieces``, ``pause`` apart."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(2)  # the body, b"{}"
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for piece in pieces:
                await asyncio.sleep(pause)
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    return handle


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A server that reads and never answers."""
    await reader.read()


async def body(client: httpx2.AsyncClient, url: str) -> AsyncIterator[bytes]:
    async with client.stream("POST", url, content=b"{}") as response:
        async for chunk in response.aiter_raw():
            yield chunk


async def test_a_paced_body_arrives_whole_and_reuses_the_connection() -> None:
    pieces = [f"data: {n}\n\n".encode() for n in range(20)]
    server, port = await serve(paced(pieces, 0.005))
    client = http_client(httpx2.Timeout(0.2, connect=1))
    try:
        for _ in range(2):  # the second request goes over the pooled connection
            got = b"".join([chunk async for chunk in body(client, f"http://127.0.0.1:{port}/")])
            assert got == b"".join(pieces)
    finally:
        await client.aclose()
        server.close()


async def test_reads_longer_in_all_than_the_timeout_do_not_time_out() -> None:
    # 30 pieces 20 ms apart: 0.6 s in all, each read well within its 0.3 s timeout
    # (the deadline moves with each read; the connection's one timer re-arms instead
    # of firing).
    # The margin is wide so that a loaded machine's late wake-ups cannot fail it.
    pieces = [b"x"] * 30
    server, port = await serve(paced(pieces, 0.02))
    client = http_client(httpx2.Timeout(0.3, connect=1))
    try:
        got = b"".join([chunk async for chunk in body(client, f"http://127.0.0.1:{port}/")])
        assert got == b"x" * 30
    finally:
        await client.aclose()
        server.close()


async def test_a_silent_server_times_the_read_out() -> None:
    server, port = await serve(paced([b"first", b"late"], 30))  # silent past any timeout
    client = http_client(httpx2.Timeout(0.3, connect=1))
    try:
        with pytest.raises(httpx2.ReadTimeout):
            _ = [chunk async for chunk in body(client, f"http://127.0.0.1:{port}/")]
    finally:
        await client.aclose()
        server.close()


async def test_a_read_cancelled_by_its_caller_closes_its_connection() -> None:
    asked = asyncio.Event()
    never = paced([b"first", b"late"], 30)  # its body cannot end within the test

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.set()
        await never(reader, writer)

    server, port = await serve(handler)
    client = http_client(httpx2.Timeout(5, connect=1))
    transport = client._transport
    assert isinstance(transport, WireTransport)

    async def reading() -> list[bytes]:
        return [chunk async for chunk in body(client, f"http://127.0.0.1:{port}/")]

    try:
        task = asyncio.ensure_future(reading())
        await asyncio.wait_for(asked.wait(), 30)  # mid-request: its connection is in use
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (pool,) = transport._pools.values()
        assert not pool._idle  # its rest unread: never handed to the next request
    finally:
        await client.aclose()
        server.close()


async def test_nothing_listening_is_a_connect_error() -> None:
    server, port = await serve(paced([], 0))
    server.close()
    await server.wait_closed()
    client = http_client(httpx2.Timeout(1, connect=1))
    try:
        with pytest.raises(httpx2.ConnectError):
            await client.post(f"http://127.0.0.1:{port}/", content=b"{}")
    finally:
        await client.aclose()


async def test_a_body_of_unknown_length_goes_whole_with_its_length() -> None:
    # httpx2 sends a streamed body chunked; read whole first, it goes with its length
    # (so that a request on a connection the server closed can be sent again).
    heads: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        data = await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
        await writer.drain()
        writer.close()

    async def parts() -> AsyncIterator[bytes]:
        yield b"clip-"
        yield b"x" * 300_000

    server, port = await serve(echo)
    client = http_client(httpx2.Timeout(5, connect=1))
    try:
        response = await client.post(f"http://127.0.0.1:{port}/audio", content=parts())
        assert response.content == b"clip-" + b"x" * 300_000
        assert b"transfer-encoding" not in heads[0].lower()
    finally:
        await client.aclose()
        server.close()


async def test_a_redirect_to_another_origin_gets_a_pool_of_its_own() -> None:
    pieces = [b"there"]
    there, there_port = await serve(paced(pieces, 0))

    async def moved(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        location = f"http://localhost:{there_port}/".encode()
        writer.write(b"HTTP/1.1 307 Moved\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % location)
        await writer.drain()

    here, here_port = await serve(moved)
    client = http_client(httpx2.Timeout(5, connect=1))
    try:
        response = await client.post(f"http://127.0.0.1:{here_port}/", content=b"{}")
        assert (response.status_code, response.content) == (200, b"there")
        transport = client._transport
        assert isinstance(transport, WireTransport)
        assert len(transport._pools) == 2
    finally:
        await client.aclose()
        here.close()
        there.close()
