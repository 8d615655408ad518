"""Real HTTP servers of four kinds on loopback, each answering the same routes, for the
HTTP client conformance suite (tests/unit/test_http_conformance.py): uvicorn (the ASGI
server the functions run on), aiohttp's web server, Python's ``http.server`` and Node's
``node:http`` (``http_server.js`` beside this file).

Every route reads the request's body and drops it; its body is ``n`` SSE pieces
``data: PORT I`` (PORT: the client's port as the server saw it, which tells a test
whether a connection was reused), each piece after the first sent once the file named by
``hold`` exists (the client makes it when the first piece has arrived: a body passed on
as it arrives goes on, one held back waits, and after ``HOLD_SECONDS`` the server closes
the connection instead), or at once without ``hold``:

* ``/sse``: streamed as it is written (chunked, the framework's default);
* ``/length``: whole, with ``Content-Length``;
* ``/close``: neither, the end of the body being the end of the connection (where the
  server can be made to send it: ``http.server`` and Node; uvicorn and aiohttp always
  frame an HTTP/1.1 body);
* ``/gzip``: streamed with ``Content-Encoding: gzip``, each piece flushed;
* ``/stall``: one piece, then nothing for ``STALL_SECONDS`` (no read timeout outlasts it);
* ``/big``: a 60,000-byte header, then the body with ``Content-Length``.

Each server closes a connection idle for ``KEEP_ALIVE`` seconds (Node a second later).
"""

from __future__ import annotations

import asyncio
import gzip
import http.server
import socket
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

KEEP_ALIVE = 0.3
HOLD_SECONDS = 30.0
"""How long a held piece waits for its file: only a net for a client that never passes
the first piece on (it takes milliseconds otherwise)."""
STALL_SECONDS = 30.0
BIG = "a" * 60_000
ALL_ROUTES = frozenset({"/sse", "/length", "/close", "/gzip", "/stall", "/big"})


@dataclass(frozen=True)
class Served:
    kind: str
    url: str  # http://127.0.0.1:PORT
    routes: frozenset[str]
    idle_close: float = KEEP_ALIVE
    """Seconds after which the server has closed an idle kept-alive connection."""


def pieces(port: int, n: int) -> list[bytes]:
    return [f"data: {port} {i}\n\n".encode() for i in range(n)]


def query(target: str) -> tuple[str, int, str]:
    parts = urlsplit(target)
    given = parse_qs(parts.query)
    return parts.path, int(given.get("n", ["3"])[0]), given.get("hold", [""])[0]


class Held(Exception):
    """The client never passed the first piece on: the server gives up the body."""


def wait_held(hold: str) -> None:
    """Until ``hold`` exists (a thread's wait); ``Held`` after ``HOLD_SECONDS``."""
    gone = threading.Event()
    for _ in range(int(HOLD_SECONDS / 0.005)):
        if Path(hold).exists():
            return
        gone.wait(0.005)
    raise Held(hold)


async def held(hold: str) -> None:
    """Until ``hold`` exists (a coroutine's wait); ``Held`` after ``HOLD_SECONDS``."""
    for _ in range(int(HOLD_SECONDS / 0.005)):
        if Path(hold).exists():  # noqa: ASYNC240 (a stat of a local file, in a test server)
            return
        await asyncio.sleep(0.005)
    raise Held(hold)


def gzip_stream() -> Any:
    return zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: the gzip container


def bound_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


def _in_thread(run: Callable[[asyncio.AbstractEventLoop], Any]) -> Callable[[], None]:
    """Runs ``run(loop)`` (which starts serving) on a loop of its own in a thread;
    returns what stops it."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(run(loop))
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    started.wait(10)

    def stop() -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)

    return stop


# uvicorn: a bare ASGI app.
async def _asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    while (await receive()).get("more_body"):
        pass
    target = scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
    path, n, hold = query(target)
    port = scope["client"][1]
    body = pieces(port, n)
    headers: list[tuple[bytes, bytes]] = [(b"content-type", b"text/event-stream")]
    if path in ("/length", "/big"):
        headers.append((b"content-length", str(len(b"".join(body))).encode()))
        if path == "/big":
            headers.append((b"x-big", BIG.encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"".join(body)})
        return
    if path == "/gzip":
        headers.append((b"content-encoding", b"gzip"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    packer = gzip_stream() if path == "/gzip" else None
    for i, piece in enumerate(body):
        if i and hold:
            await held(hold)
        if packer is not None:
            piece = packer.compress(piece) + packer.flush(zlib.Z_SYNC_FLUSH)
        await send({"type": "http.response.body", "body": piece, "more_body": True})
        if path == "/stall":
            await asyncio.sleep(STALL_SECONDS)
            break
    tail = packer.flush() if packer is not None else b""
    await send({"type": "http.response.body", "body": tail})


@contextmanager
def uvicorn_server() -> Iterator[Served]:
    import uvicorn

    sock = bound_socket()
    config = uvicorn.Config(
        _asgi,
        lifespan="off",
        log_level="warning",
        timeout_keep_alive=KEEP_ALIVE,  # type: ignore[arg-type]
    )
    server = uvicorn.Server(config)

    async def run(loop: asyncio.AbstractEventLoop) -> None:
        loop.create_task(server.serve(sockets=[sock]))
        for _ in range(1000):  # uvicorn says it has started by a flag alone
            if server.started:
                break
            await asyncio.sleep(0.01)

    stop = _in_thread(run)
    try:
        yield Served(
            "uvicorn", f"http://127.0.0.1:{sock.getsockname()[1]}", ALL_ROUTES - {"/close"}
        )
    finally:
        server.should_exit = True
        threading.Event().wait(0.2)
        stop()
        sock.close()


# aiohttp's web server.
@contextmanager
def aiohttp_server() -> Iterator[Served]:
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        path, n, hold = query(request.path_qs)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        body = pieces(peer[1] if peer else 0, n)
        if path in ("/length", "/big"):
            headers = {"X-Big": BIG} if path == "/big" else {}
            return web.Response(body=b"".join(body), headers=headers)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        if path == "/gzip":
            response.headers["Content-Encoding"] = "gzip"
        await response.prepare(request)
        packer = gzip_stream() if path == "/gzip" else None
        for i, piece in enumerate(body):
            if i and hold:
                await held(hold)
            if packer is not None:
                piece = packer.compress(piece) + packer.flush(zlib.Z_SYNC_FLUSH)
            await response.write(piece)
            if path == "/stall":
                await asyncio.sleep(STALL_SECONDS)
                break
        if packer is not None:
            await response.write(packer.flush())
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, keepalive_timeout=KEEP_ALIVE, access_log=None)
    sock = bound_socket()

    async def run(loop: asyncio.AbstractEventLoop) -> None:
        await runner.setup()
        await web.SockSite(runner, sock).start()

    stop = _in_thread(run)
    try:
        yield Served(
            "aiohttp", f"http://127.0.0.1:{sock.getsockname()[1]}", ALL_ROUTES - {"/close"}
        )
    finally:
        stop()
        sock.close()


# Python's http.server.
class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = KEEP_ALIVE  # an idle kept-alive connection is closed after it

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, n, hold = query(self.path)
        body = pieces(self.client_address[1], n)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if path in ("/length", "/big"):
            if path == "/big":
                self.send_header("X-Big", BIG)
            self.send_header("Content-Length", str(len(b"".join(body))))
            self.end_headers()
            self.wfile.write(b"".join(body))
            return
        if path == "/close":
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Transfer-Encoding", "chunked")
        if path == "/gzip":
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        packer = gzip_stream() if path == "/gzip" else None

        def send(data: bytes) -> None:
            if path != "/close":
                data = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
            self.wfile.write(data)
            self.wfile.flush()

        for i, piece in enumerate(body):
            if i and hold:
                wait_held(hold)
            if packer is not None:
                piece = packer.compress(piece) + packer.flush(zlib.Z_SYNC_FLUSH)
            send(piece)
            if path == "/stall":
                threading.Event().wait(STALL_SECONDS)
                break
        if packer is not None:
            send(packer.flush())
        if path != "/close":
            self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST  # noqa: N815 (http.server's name)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (a stalled body's, read no further): no traceback


@contextmanager
def python_server() -> Iterator[Served]:
    server = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served("http.server", f"http://127.0.0.1:{server.server_address[1]}", ALL_ROUTES)
    finally:
        server.shutdown()
        server.server_close()


# Node's node:http.
@contextmanager
def node_server() -> Iterator[Served]:
    script = Path(__file__).with_name("http_server.js")
    node = subprocess.Popen(
        ["node", str(script), str(round(KEEP_ALIVE * 1000))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert node.stdout is not None
        port = int(node.stdout.readline())
        # Node closes an idle connection a second after its keepAliveTimeout.
        yield Served("node", f"http://127.0.0.1:{port}", ALL_ROUTES, KEEP_ALIVE + 1)
    finally:
        node.kill()
        with suppress(subprocess.TimeoutExpired):
            node.wait(5)


SERVERS = {
    "uvicorn": uvicorn_server,
    "aiohttp": aiohttp_server,
    "http.server": python_server,
    "node": node_server,
}


def gunzip(data: bytes) -> bytes:
    return gzip.decompress(data)
