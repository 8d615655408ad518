"""A round-robin HTTP/1.1 proxy on loopback: each request goes to the next backend.

Production runs many instances of each function behind Google's front end, so two
consecutive calls of one client, a task's deliveries and its watchdog rarely meet the
same process (or its memory). The local stack and the end-to-end tests put two
instances of ``api`` and two of ``tasks`` behind one of these, so that they meet that
too::

    python -m tools.proxy --port 8080 --backend 127.0.0.1:8090 --backend 127.0.0.1:8091

One request per client connection: it is forwarded with ``Connection: close``, so the
backend closes after its response, and so do we; a client's next request opens a new
connection and meets the next backend. Responses are piped as they come (SSE streams
included), and a client that hangs up is hung up on upstream at once, as a front end
does, so a run's "the client left" path is exercised too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator, Sequence

Backend = tuple[str, int]
_HOP = (b"connection", b"keep-alive", b"proxy-connection")


class RoundRobin:
    """Serves on ``port`` (0: a free one) and forwards each request to the next backend."""

    def __init__(self, backends: Sequence[Backend], port: int = 0) -> None:
        self._next: Iterator[Backend] = itertools.cycle(list(backends))
        self._port = port
        self._server: asyncio.Server | None = None
        self.forwarded = 0

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self._port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head[:-4].split(b"\r\n")
            kept = [
                line for line in lines[1:] if line.split(b":", 1)[0].strip().lower() not in _HOP
            ]
            body = await _body(reader, kept)
            host, port = next(self._next)
            self.forwarded += 1
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError):
            writer.close()
            return
        up_writer.write(b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""]) + body)
        piping = asyncio.ensure_future(_pipe(up_reader, writer))
        hung_up = asyncio.ensure_future(reader.read(1))  # EOF: the client left
        try:
            await asyncio.wait({piping, hung_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (piping, hung_up):
                task.cancel()
            for stream in (up_writer, writer):
                stream.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await stream.wait_closed()


async def _body(reader: asyncio.StreamReader, headers: list[bytes]) -> bytes:
    """The request's body, as sent (by Content-Length, or chunked to its last chunk)."""
    fields = {}
    for line in headers:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip().lower()
    if b"chunked" in fields.get(b"transfer-encoding", b""):
        raw = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            raw += size_line
            size = int(size_line.split(b";")[0], 16)
            raw += await reader.readexactly(size + 2)
            if size == 0:
                return bytes(raw)
    length = int(fields.get(b"content-length", b"0") or 0)
    return await reader.readexactly(length) if length else b""


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while chunk := await source.read(65536):
        sink.write(chunk)
        await sink.drain()


class ProxyThread:
    """A ``RoundRobin`` on its own event loop in a daemon thread (for tests)."""

    def __init__(self, backends: Sequence[Backend], port: int = 0) -> None:
        self.proxy = RoundRobin(backends, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ProxyThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}"


def parse_backend(text: str) -> Backend:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


async def _main(port: int, backends: list[Backend]) -> None:
    proxy = RoundRobin(backends, port)
    await proxy.start()
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", action="append", type=parse_backend, required=True)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port, args.backend))


if __name__ == "__main__":
    main()
