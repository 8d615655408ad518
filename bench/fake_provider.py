"""A lean streaming model server for benchmarks (raw asyncio, real HTTP).

The test suite's fakes (tests/fakes/) are built for scripting; this one is built to
cost as little CPU as possible, so the benchmark measures our side rather than the
fake. The last user message says what to stream: ``tokens=N rate=R`` (R tokens per
second, 0 for as fast as possible), optionally `` ttft=MS`` (wait that long before
answering, as a model does before its first token). ``--wire`` picks the format: OpenAI Chat
Completions (the default), Anthropic Messages or Gemini ``streamGenerateContent``;
the path of the request is not looked at.

Like the providers' own servers, it keeps each connection open for the next request
(HTTP/1.1 keep-alive) and sends the stream as chunked transfer encoding.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes import anthropic_server, gemini_server
from tests.fakes.openai_server import chunk

_RULE = re.compile(rb"tokens=(\d+) rate=(\d+)(?: ttft=(\d+))?")
_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)
_END = b"0\r\n\r\n"


def chunked(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked body (empty data: nothing, not the end)."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


WIRES = {
    "openai": (
        chunk({"role": "assistant", "content": ""}),
        [chunk({"content": f" tok{n}"}) for n in range(10_000)],
        chunk({}, "stop") + b"data: [DONE]\n\n",
    ),
    "anthropic": (
        anthropic_server.message_start()
        + anthropic_server.event(
            "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
        ),
        [anthropic_server.text_delta(0, f" tok{n}") for n in range(10_000)],
        anthropic_server.event("content_block_stop", {"index": 0})
        + anthropic_server.message_end("end_turn", 10),
    ),
    "gemini": (
        b"",
        [gemini_server.chunk([{"text": f" tok{n}"}]) for n in range(10_000)],
        gemini_server.chunk(
            [{"text": ""}], "STOP", {"promptTokenCount": 3, "candidatesTokenCount": 10}
        ),
    ),
}
WIRES = {
    name: (chunked(first), [chunked(t) for t in tokens], chunked(last) + _END)
    for name, (first, tokens, last) in WIRES.items()
}
FIRST, TOKENS, LAST = WIRES["openai"]


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            await answer(head, reader, writer)
            if re.search(rb"(?i)\r\nconnection: *close", head):
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def answer(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    body = await reader.readexactly(length)
    rule = _RULE.findall(body)
    tokens, rate = (int(rule[-1][0]), int(rule[-1][1])) if rule else (20, 0)
    ttft = int(rule[-1][2] or 0) if rule else 0
    if ttft:  # the model's own time to first token (ms), before it answers at all
        await asyncio.sleep(ttft / 1000)
    writer.write(_HEAD + FIRST)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for n in range(tokens):
        if rate:
            delay = start + n / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        writer.write(TOKENS[n])
        await writer.drain()
    writer.write(LAST)
    await writer.drain()


async def serve(port: int, wire: str = "openai") -> None:
    global FIRST, TOKENS, LAST
    FIRST, TOKENS, LAST = WIRES[wire]
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--wire", choices=sorted(WIRES), default="openai")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.wire))


if __name__ == "__main__":
    main()
