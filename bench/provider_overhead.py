"""CPU per streamed token: each model adapter beside its raw SDK client, in one run.

For each provider, a lean fake (bench/fake_provider.py, its own process, so none of
its CPU is counted here) streams an unpaced reply of ``--tokens`` tokens in that
provider's wire format over real HTTP. The same reply is read, alternately:

* ``sdk``: the official SDK's own typed streaming (``chat.completions.create(stream=
  True)``, ``messages.create(stream=True)``, ``aio.models.generate_content_stream``),
  iterating its events and doing nothing with them;
* ``ours``: our adapter's ``stream``, up to its ``Finish`` (tool-call assembly,
  error mapping and opaque state included).

Printed: median process CPU per token over ``--runs`` rounds (µs), and the ratio.
Run with ``make bench`` or ``.venv/bin/python bench/provider_overhead.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import anthropic  # noqa: E402
import httpx2  # noqa: E402
import openai  # noqa: E402
from google import genai  # noqa: E402
from google.genai import types  # noqa: E402

from shared.llm.anthropic import AnthropicProvider  # noqa: E402
from shared.llm.base import ChatMessage, ModelProvider, ModelRequest  # noqa: E402
from shared.llm.gemini import GeminiProvider  # noqa: E402
from shared.llm.openai import OpenAIProvider  # noqa: E402

Reader = Callable[[str], Awaitable[int]]
Closer = Callable[[], Awaitable[None]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_fake(wire: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    fake = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "fake_provider.py"),
            f"--port={port}",
            f"--wire={wire}",
        ]
    )
    # A net, not a measure: a loaded machine may take a minute to start Python.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and fake.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return fake, port
        except OSError:
            time.sleep(0.05)
    fake.kill()
    raise RuntimeError(f"the {wire} fake did not start (exit code {fake.poll()})")


async def closing(*closes: Awaitable[None]) -> None:
    """Close the clients while the loop runs: the fake keeps connections alive, and a
    client closed after ``asyncio.run`` has ended fails with ``Event loop is closed``."""
    for step in closes:
        await step


def ours(provider: ModelProvider) -> Reader:
    async def read(rule: str) -> int:
        request = ModelRequest("sys", [ChatMessage("user", rule)])
        return sum([1 async for _ in provider.stream(request)])

    return read


def openai_readers(port: int) -> tuple[Reader, Reader, Closer]:
    url = f"http://127.0.0.1:{port}/v1"
    client = openai.AsyncOpenAI(api_key="k", base_url=url, max_retries=0)

    async def sdk(rule: str) -> int:
        stream = await client.chat.completions.create(
            model="bench", messages=[{"role": "user", "content": rule}], stream=True
        )
        return sum([1 async for _ in stream])

    provider = OpenAIProvider.connect("bench", "k", url, max_retries=0)
    return sdk, ours(provider), lambda: closing(client.close(), provider.aclose())


def anthropic_readers(port: int) -> tuple[Reader, Reader, Closer]:
    url = f"http://127.0.0.1:{port}"
    client = anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)

    async def sdk(rule: str) -> int:
        stream = await client.messages.create(
            model="bench",
            max_tokens=4096,
            messages=[{"role": "user", "content": rule}],
            stream=True,
        )
        return sum([1 async for _ in stream])

    provider = AnthropicProvider.connect("bench", "k", url, max_retries=0)
    return sdk, ours(provider), lambda: closing(client.close(), provider.aclose())


def gemini_readers(port: int) -> tuple[Reader, Reader, Closer]:
    url = f"http://127.0.0.1:{port}"
    # The SDK's own httpx2 client, as in production: given no transport, genai would
    # take aiohttp, which the dev dependencies bring (the HTTP client's tests and bench).
    transport = httpx2.AsyncHTTPTransport()
    options = types.HttpOptions(base_url=url, async_client_args={"transport": transport})
    client = genai.Client(api_key="k", http_options=options)

    async def sdk(rule: str) -> int:
        stream = await client.aio.models.generate_content_stream(model="bench", contents=rule)
        return sum([1 async for _ in stream])

    provider = GeminiProvider.connect("bench", "k", url, max_retries=0)
    return sdk, ours(provider), lambda: closing(client.aio.aclose(), provider.aclose())


PROVIDERS = {
    "openai": ("openai", openai_readers),
    "anthropic": ("anthropic", anthropic_readers),
    "google": ("gemini", gemini_readers),
}


async def cpu_per_token(read: Reader, tokens: int) -> float:
    started = time.process_time()
    await read(f"tokens={tokens} rate=0")
    return (time.process_time() - started) / tokens * 1e6


async def measure(name: str, tokens: int, runs: int) -> tuple[float, float]:
    wire, make = PROVIDERS[name]
    fake, port = start_fake(wire)
    try:
        sdk, adapter, close = make(port)
        await sdk(f"tokens={tokens} rate=0")  # warm both (connections, imports, caches)
        await adapter(f"tokens={tokens} rate=0")
        sdk_us: list[float] = []
        ours_us: list[float] = []
        for _ in range(runs):  # alternate, so drift hits both sides alike
            sdk_us.append(await cpu_per_token(sdk, tokens))
            ours_us.append(await cpu_per_token(adapter, tokens))
        await close()
        return statistics.median(sdk_us), statistics.median(ours_us)
    finally:
        fake.kill()
        fake.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=sorted(PROVIDERS), action="append")
    args = parser.parse_args()
    print(f"CPU per streamed token, median of {args.runs} unpaced {args.tokens}-token replies")
    print(f"{'provider':<10} {'sdk typed (µs)':>15} {'ours (µs)':>10} {'ours/sdk':>9}")
    for name in args.only or list(PROVIDERS):
        sdk_us, ours_us = asyncio.run(measure(name, args.tokens, args.runs))
        print(f"{name:<10} {sdk_us:>15.1f} {ours_us:>10.1f} {ours_us / sdk_us:>8.2f}×", flush=True)


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("provider_overhead"):
        main()
