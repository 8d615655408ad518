"""One long conversation held by a peer of ``bench/prompt_cache.py``, as its docs show
a conversation is kept: the OpenAI Agents SDK with a ``SQLiteSession`` (in memory), or
Pydantic AI with ``message_history`` (each run given the last one's
``all_messages()``). Each turn streams its reply from the fake model; one JSON line per
turn says how long its first text took.

Runs in the peers' own virtualenv (``.bench-peers``, as ``bench/peers.py``), so it
imports nothing of ours:

    .bench-peers/bin/python bench/peer_conversation.py --peer=agents --turns=40 \\
        --provider=http://127.0.0.1:8089/v1 --system=system.txt --said=said.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

Turn = Callable[[str], AsyncIterator[str]]


def agents_sdk(provider: str, system: str) -> Turn:
    """An ``Agent`` on ``OpenAIChatCompletionsModel``, its conversation in a session."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        SQLiteSession,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI
    from openai.types.responses import ResponseTextDeltaEvent

    set_tracing_disabled(True)  # as bench/peers.py: no OpenAI platform to export to
    client = AsyncOpenAI(base_url=provider, api_key="bench")
    model = OpenAIChatCompletionsModel(model="bench", openai_client=client)
    agent: Agent[Any] = Agent(name="Spark AI Agent", instructions=system, model=model)
    session = SQLiteSession("bench")  # in memory

    async def turn(text: str) -> AsyncIterator[str]:
        result = Runner.run_streamed(agent, text, session=session)
        async for event in result.stream_events():
            if event.type == "raw_response_event" and isinstance(
                event.data, ResponseTextDeltaEvent
            ):
                yield event.data.delta

    return turn


def pydantic_ai(provider: str, system: str) -> Turn:
    """An ``Agent`` on ``OpenAIChatModel``, each run given the history the last returned."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("bench", provider=OpenAIProvider(base_url=provider, api_key="bench"))
    agent = Agent(model, instructions=system)
    history: list[ModelMessage] = []

    async def turn(text: str) -> AsyncIterator[str]:
        async with agent.run_stream(text, message_history=history) as result:
            async for delta in result.stream_text(delta=True, debounce_by=None):
                yield delta
        history[:] = result.all_messages()

    return turn


PEERS = {"agents": agents_sdk, "pydantic-ai": pydantic_ai}


async def converse(turn: Turn, said: list[str]) -> None:
    for n, text in enumerate(said):
        began, first = time.perf_counter(), None
        async for _ in turn(text):
            if first is None:
                first = time.perf_counter() - began
        print(json.dumps({"turn": n + 1, "ttft": first}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer", choices=sorted(PEERS), required=True)
    parser.add_argument("--provider", required=True, help="the fake model's base URL (…/v1)")
    parser.add_argument("--system", type=Path, required=True, help="the system prompt's file")
    parser.add_argument("--said", type=Path, required=True, help="the user's turns (JSON list)")
    args = parser.parse_args()
    turn = PEERS[args.peer](args.provider, args.system.read_text())
    asyncio.run(converse(turn, json.loads(args.said.read_text())))


if __name__ == "__main__":
    main()
