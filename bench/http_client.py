"""CPU per streamed token of each candidate HTTP client for the provider calls, side by side.

A lean fake (bench/fake_provider.py, its own process, so none of its CPU is counted
here) streams OpenAI Chat Completions replies over real HTTP on loopback, paced as a
model streams them (``--rate`` tokens a second: each token its own socket read, as the
api sees them), ``--streams`` at once. Each round, every candidate reads the same
replies (rounds alternate the candidates, so drift hits all alike), counting the body's
chunks and doing nothing else with them (what the adapters then do is the same for all):

* ``wire``: ``shared/llm/wire/``'s ``WireClient.stream``, the chat requests' client;
* ``aiohttp``: an ``aiohttp.ClientSession`` read with ``content.iter_any()``, the least
  a client on aiohttp would cost;
* ``httpx2``: ``httpx2.AsyncClient`` on its own transport (httpcore2, h11, anyio), as
  the SDKs are made by default;
* ``sdk/wire``: the SDKs' door, ``transport.http_client`` (httpx2's API on ``wire``);
* ``sdk/aiohttp``: the OpenAI SDK's own aiohttp backend (``openai.DefaultAioHttpClient``,
  httpx2's API on aiohttp).

Printed: the median CPU per token (µs) and per second of one stream (ms) over
``--runs`` rounds, each beside ``wire``'s (the ratio), and the time a fresh interpreter
spends importing each client beyond what the api imports anyway (ms, median of 5).
The loop is uvloop's, as the api's.
Run with ``make bench`` or ``.venv/bin/python bench/http_client.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import aiohttp  # noqa: E402
import httpx2  # noqa: E402
import openai  # noqa: E402
import uvloop  # noqa: E402

from bench.provider_overhead import start_fake  # noqa: E402
from shared.llm.transport import http_client  # noqa: E402
from shared.llm.wire import WireClient  # noqa: E402

Reader = Callable[[], Awaitable[int]]
Closer = Callable[[], Awaitable[None]]

IMPORTS = {
    "wire": "shared.llm.wire",
    "aiohttp": "aiohttp",
    "httpx2": "httpx2",
    "sdk/wire": "shared.llm.transport",
    "sdk/aiohttp": "aiohttp, httpx2",
}


def readers(url: str, body: bytes) -> dict[str, tuple[Reader, Closer]]:
    path = "/chat/completions"
    headers = {"Authorization": "Bearer k", "Content-Type": "application/json"}
    limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=1000)

    chat = WireClient(url, {"Authorization": "Bearer k"}, max_retries=0)

    async def wire() -> int:
        async with chat.stream(path, body) as chunks:
            return sum([1 async for _ in chunks])

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def plain_aiohttp() -> int:
        async with session.post(url + path, data=body, headers=headers) as response:
            return sum([1 async for _ in response.content.iter_any()])

    def through(client: httpx2.AsyncClient) -> Reader:
        async def read() -> int:
            async with client.stream("POST", url + path, content=body, headers=headers) as r:
                return sum([1 async for _ in r.aiter_raw()])

        return read

    own = httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(120, connect=10))
    ours = http_client(httpx2.Timeout(120, connect=10))
    theirs = openai.DefaultAioHttpClient(limits=limits)
    return {
        "wire": (wire, chat.aclose),
        "aiohttp": (plain_aiohttp, session.close),
        "httpx2": (through(own), own.aclose),
        "sdk/wire": (through(ours), ours.aclose),
        "sdk/aiohttp": (through(theirs), theirs.aclose),
    }


async def measure(streams: int, tokens: int, rate: int, runs: int) -> dict[str, list[float]]:
    fake, port = start_fake("openai")
    rule = b'{"role":"user","content":"tokens=%d rate=%d"}' % (tokens, rate)
    body = b'{"model":"bench","stream":true,"messages":[%s]}' % rule
    try:
        made = readers(f"http://127.0.0.1:{port}/v1", body)
        for read, _ in made.values():  # warm: connections, imports, caches
            await asyncio.gather(*(read() for _ in range(streams)))
        cpu: dict[str, list[float]] = {name: [] for name in made}
        for _ in range(runs):
            for name, (read, _) in made.items():
                started = time.process_time()
                await asyncio.gather(*(read() for _ in range(streams)))
                cpu[name].append(time.process_time() - started)
        for _, close in made.values():
            await close()
        return cpu
    finally:
        fake.kill()
        fake.wait()


# What the api has imported before any client: the client's own import is the rest.
BASE = "import asyncio, json, ssl, urllib.request, zlib, shared.llm.base"


def import_ms(modules: str) -> float:
    """Milliseconds a fresh interpreter spends importing ``modules`` once it has
    imported ``BASE`` (``-X importtime``'s own count of the imports, median of 5)."""
    code = f"{BASE}; import sys; sys.stderr.write('mark\\n'); import {modules}"
    times = []
    for _ in range(5):
        run = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        after = run.stderr.split("mark\n", 1)[1]
        # A top-level import's line: "import time: SELF | CUMULATIVE | name", unindented.
        times.append(
            sum(
                int(line.split("|")[1])
                for line in after.splitlines()
                if line.startswith("import time:") and not line.split("|")[2][1:].startswith(" ")
            )
        )
    return statistics.median(times) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--rate", type=int, default=50, help="tokens a second (0: unpaced)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cpu = uvloop.run(measure(args.streams, args.tokens, args.rate, args.runs))
    per_round = args.streams * args.tokens
    stream_seconds = args.streams * args.tokens / args.rate if args.rate else None
    pace = f"at {args.rate} tokens/s" if args.rate else "unpaced"
    print(
        f"HTTP clients: CPU of {args.streams} streams at once of {args.tokens} tokens {pace},"
        f" median of {args.runs} rounds"
    )
    print(f"{'client':<12} {'µs/token':>9} {'ms/stream-s':>12} {'×wire':>6} {'import ms':>10}")
    base = statistics.median(cpu["wire"])
    for name, seconds in cpu.items():
        median = statistics.median(seconds)
        per_stream = f"{median / stream_seconds * 1000:12.2f}" if stream_seconds else f"{'-':>12}"
        print(
            f"{name:<12} {median / per_round * 1e6:9.1f} {per_stream} {median / base:5.2f}×"
            f" {import_ms(IMPORTS[name]):10.0f}",
            flush=True,
        )


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("http_client"):
        main()
