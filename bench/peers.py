"""The peers of ``bench/stream_overhead.py``: the smallest honest chat endpoint a user of
the OpenAI Agents SDK or of Pydantic AI would write, to measure our endpoint against;
and a floor (``relay``): the same endpoint with no library between it and the model,
one kept-alive socket read and one ``json.loads`` per token, which is what any Python
endpoint on this server pays to relay a stream, before it does anything of its own.

One ``POST`` with ``{"text": ...}`` runs an agent of that library against the same fake
model as our endpoint (``bench/fake_provider.py``, OpenAI Chat Completions) and streams
each text delta to the client as an SSE ``text`` frame, framed as ours are (``id``,
``event``, a one-line JSON ``data``). It persists nothing and checks no one: what ours
does beyond this (auth, admission, the conversation's writes) is what the comparison
shows. Served by uvicorn with uvloop and httptools under Starlette, as the ``api`` is.

Runs in the peers' own virtualenv (``.bench-peers``, made by ``make bench`` from
``bench/peers-requirements.txt``), so it imports nothing of ours:

    .bench-peers/bin/python bench/peers.py --peer=agents --port=8090 \\
        --provider=http://127.0.0.1:8089/v1
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

INSTRUCTIONS = "You are Spark AI Agent, a tutor. Answer the user."
Deltas = Callable[[str], AsyncIterator[str]]


def agents_sdk(provider: str) -> Deltas:
    """The OpenAI Agents SDK: an ``Agent`` on ``OpenAIChatCompletionsModel`` (Chat
    Completions, as the fake speaks), read with ``Runner.run_streamed``."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI
    from openai.types.responses import ResponseTextDeltaEvent

    # Tracing exports each run to OpenAI's platform, which a model elsewhere has no key
    # for (and this machine no route to): the SDK's own advice for other providers.
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=provider, api_key="bench")
    model = OpenAIChatCompletionsModel(model="bench", openai_client=client)
    agent: Agent[Any] = Agent(name="Spark AI Agent", instructions=INSTRUCTIONS, model=model)

    async def deltas(text: str) -> AsyncIterator[str]:
        result = Runner.run_streamed(agent, text)
        async for event in result.stream_events():
            if event.type == "raw_response_event" and isinstance(
                event.data, ResponseTextDeltaEvent
            ):
                yield event.data.delta

    return deltas


def pydantic_ai(provider: str) -> Deltas:
    """Pydantic AI: an ``Agent`` on ``OpenAIChatModel`` with a provider ``base_url``, read
    with ``run_stream`` and ``stream_text(delta=True)``."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("bench", provider=OpenAIProvider(base_url=provider, api_key="bench"))
    agent = Agent(model, instructions=INSTRUCTIONS)

    async def deltas(text: str) -> AsyncIterator[str]:
        async with agent.run_stream(text) as result:
            # Each delta as it comes, as ours sends each token: the default groups them
            # over 100 ms, which would hold the first token back and save the per-token
            # cost the comparison is about.
            async for delta in result.stream_text(delta=True, debounce_by=None):
                yield delta

    return deltas


def relay(provider: str) -> Deltas:
    """The floor: the Chat Completions request written to a kept-alive connection, its
    chunked SSE body read with asyncio's streams, each ``data:`` line parsed for its
    text. No library, no retries, no typed events."""
    host, _, rest = provider.removeprefix("http://").partition("/")
    address, _, port = host.partition(":")
    path = f"/{rest}/chat/completions"
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def deltas(text: str) -> AsyncIterator[str]:
        body = json.dumps(
            {"model": "bench", "stream": True, "messages": [{"role": "user", "content": text}]}
        ).encode()
        reader, writer = idle.pop() if idle else await asyncio.open_connection(address, port)
        try:
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Authorization: Bearer bench\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"the model answered {head[:40]!r}")
            buffered = b""
            while size := int(await reader.readline(), 16):
                buffered += (await reader.readexactly(size + 2))[:-2]
                *lines, buffered = buffered.split(b"\n")
                for line in lines:
                    if line.startswith(b"data: {"):
                        choice = json.loads(line[6:])["choices"][0]
                        if content := choice["delta"].get("content"):
                            yield content
            await reader.readline()  # the empty line after the last chunk
        except BaseException:  # a stream left part-read cannot carry the next request
            writer.close()
            raise
        idle.append((reader, writer))

    return deltas


PEERS = {"agents": agents_sdk, "pydantic-ai": pydantic_ai, "relay": relay}


def app(deltas: Deltas) -> Starlette:
    async def messages(request: Request) -> StreamingResponse:
        text = str((await request.json())["text"])

        async def frames() -> AsyncIterator[bytes]:
            n = 0
            async for delta in deltas(text):
                n += 1
                data = json.dumps({"content": delta}, ensure_ascii=False)
                yield f"id: {n}\nevent: text\ndata: {data}\n\n".encode()
            yield b"event: done\ndata: {}\n\n"

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)

    async def healthz(request: Request) -> StreamingResponse:
        return StreamingResponse(iter([b"ok"]))

    return Starlette(
        routes=[Route("/messages", messages, methods=["POST"]), Route("/healthz", healthz)]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer", choices=sorted(PEERS), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--provider", required=True, help="the fake model's base URL (…/v1)")
    args = parser.parse_args()
    # loop and http "auto": uvloop and httptools, as uvicorn's worker serves the api.
    uvicorn.run(
        app(PEERS[args.peer](args.provider)),
        host="127.0.0.1",
        port=args.port,
        log_level="error",
        loop="auto",
        http="auto",
    )


if __name__ == "__main__":
    main()
