"""The model SDKs' HTTP client (``shared/llm/transport.py``): a read keeps its timeout
with one deadline timer per connection, and everything else is httpx's as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpcore2
import httpx2
import pytest

from shared.llm.transport import DeadlineBackend, http_client

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
    # (the deadline moves with each read; the one timer re-arms instead of firing).
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
    server, port = await serve(paced([b"first", b"late"], 1.0))
    client = http_client(httpx2.Timeout(0.3, connect=1))
    try:
        with pytest.raises(httpx2.ReadTimeout):
            _ = [chunk async for chunk in body(client, f"http://127.0.0.1:{port}/")]
    finally:
        await client.aclose()
        server.close()


async def test_a_read_cancelled_by_its_caller_stays_cancelled() -> None:
    server, port = await serve(silent)
    stream = await DeadlineBackend().connect_tcp("127.0.0.1", port, timeout=1)
    try:
        read = asyncio.ensure_future(stream.read(1024, timeout=10))
        await asyncio.sleep(0.05)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
    finally:
        await stream.aclose()
        server.close()


async def test_a_timeout_after_the_caller_cancelled_stays_a_cancellation() -> None:
    server, port = await serve(silent)
    stream = await DeadlineBackend().connect_tcp("127.0.0.1", port, timeout=1)

    async def reading() -> bytes:
        return await stream.read(1024, timeout=0.05)

    try:
        task = asyncio.ensure_future(reading())
        await asyncio.sleep(0)
        task.cancel()  # before the deadline: ours comes second, and must not hide it
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await stream.aclose()
        server.close()


async def test_a_closed_connection_reads_empty_and_is_readable_when_idle() -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server, port = await serve(close_at_once)
    stream = await DeadlineBackend().connect_tcp("127.0.0.1", port, timeout=1)
    try:
        assert await stream.read(1024, timeout=1) == b""
        assert stream.get_extra_info("is_readable") is True
        assert stream.get_extra_info("server_addr")[1] == port
    finally:
        await stream.aclose()
        server.close()


async def test_nothing_listening_is_a_connect_error() -> None:
    server, port = await serve(paced([], 0))
    server.close()
    await server.wait_closed()
    with pytest.raises(httpcore2.ConnectError):
        await DeadlineBackend().connect_tcp("127.0.0.1", port, timeout=1)
