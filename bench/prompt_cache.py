"""What a long conversation pays for reading its context again: the prompt cache (issue 51).

    .venv/bin/python bench/prompt_cache.py [--turns 40] [--no-peers]

One conversation of ``--turns`` turns, the same user turns for each side, held by the
real agent (``shared.wiring.assemble`` on the in-memory stores, our system prompt and
tools, ``SPARK_MODEL=openai:…`` through our adapter) and, in the same run, by the peers
of ``bench/peer_conversation.py`` (the OpenAI Agents SDK with a session, Pydantic AI
with ``message_history``; in ``.bench-peers``, given our system prompt, no tools).
Each side talks to a fake OpenAI of its own (tests/fakes/openai_server.py) that models
the provider's prompt cache (tests/fakes/prompt_cache.py: keyed by
``prompt_cache_key``, else by the prefix alone) and a provider's latency: the first
token comes after ``PREFILL_BASE`` plus ``PREFILL_PER_TOKEN`` for each input token
not read from the cache. Every fifth turn (the 3rd, 8th…) the model calls a tool first (ours only:
the peers have none), as a tutor reading a skill does.

Printed for each side: the share of consecutive model requests that extend the one
before (byte for byte, ``prompt_cache.extends``), the cached input tokens as a share of
the input tokens, the input's price relative to the same tokens uncached (cached
tokens at ``CACHED_PRICE``), and the time to the first token (as each side's caller
sees it: ours from the send, a peer's from its run) at the last turn against the first.
Timings are printed, never asserted; the shares do not depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from shared.agent.stream.events import TextEvent  # noqa: E402
from shared.agent.stream.transcript import Frame  # noqa: E402
from shared.auth.base import User  # noqa: E402
from shared.clock import SystemClock  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.llm.openai import OpenAIProvider  # noqa: E402
from shared.prompts import load_prompt  # noqa: E402
from shared.queue.memory import InMemoryTaskQueue  # noqa: E402
from shared.store.memory import (  # noqa: E402
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.wiring import assemble  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Script, ServerThread  # noqa: E402
from tests.fakes.prompt_cache import PromptCache, Read, extending  # noqa: E402

PEERS_PYTHON = ROOT / ".bench-peers" / "bin" / "python"
PREFILL_BASE = 0.05
"""Seconds before a model's first token whatever it reads (the fake's model)."""
PREFILL_PER_TOKEN = 0.00005
"""Seconds a model takes to read one input token not in its cache (20,000 a second)."""
CACHED_PRICE = 0.1
"""A cached input token's price, against an uncached one's (Anthropic's and OpenAI's)."""
REPLY = [f"{word} " for word in ("Here is a clear answer, step by step, " * 8).split()]
TOPICS = ("fractions", "photosynthesis", "the water cycle", "Tudor England", "volcanoes")


def said(turns: int) -> list[str]:
    """The user's turns: a question of a few sentences each, as a teacher writes them."""
    return [
        f"Turn {n + 1}: my class of Year 6 learners is working on {TOPICS[n % len(TOPICS)]}. "
        "Could you suggest how to explain the next part simply, with one example they "
        "can try themselves and one question to check they understood it?"
        for n in range(turns)
    ]


@dataclass
class Side:
    name: str
    fake: FakeOpenAI
    first_tokens: list[float] = field(default_factory=list)

    @property
    def reads(self) -> list[Read]:
        return self.fake.reads

    def lines(self) -> str:
        bodies, reads = self.fake.requests, self.reads
        given = sum(r.input_tokens for r in reads)
        cached = sum(r.cached_tokens for r in reads)
        price = (given - cached + CACHED_PRICE * cached) / given if given else 1.0
        first, last = self.first_tokens[0], self.first_tokens[-1]
        # The provider's part of it, as the fake models it (the same on any machine).
        modelled = [PREFILL_BASE + r.uncached_tokens * PREFILL_PER_TOKEN for r in reads]
        turns = len(self.first_tokens)
        return (
            f"{self.name}: {len(bodies)} requests, {extending(bodies, 'openai'):.1%} extend "
            f"the one before; cached {cached} of {given} input tokens ({cached / given:.1%}); "
            f"input price {price:.1%} of uncached; turn {turns} reads {reads[-1].input_tokens} "
            f"input tokens, turn 1 {reads[0].input_tokens}\n"
            f"{'':>4}first token, as the caller sees it: turn {turns} {last * 1000:.0f} ms "
            f"against turn 1 {first * 1000:.0f} ms ({last / first:.2f}x); the provider's "
            f"part (modelled): {modelled[-1] * 1000:.0f} ms against {modelled[0] * 1000:.0f} ms"
        )


def caching_fake(tool_every: int | None) -> FakeOpenAI:
    """A fake OpenAI that models the cache and answers every request after its prefill."""
    fake = FakeOpenAI()
    fake.cache = PromptCache("openai")

    def answer(body: dict[str, Any]) -> Script:
        read = fake.reads[-1]
        delay = PREFILL_BASE + read.uncached_tokens * PREFILL_PER_TOKEN
        last = (body.get("messages") or [{}])[-1]
        text = str(last.get("content") or "")
        turn = int(text.split(":", 1)[0].removeprefix("Turn ")) if text.startswith("Turn") else 0
        if tool_every and last.get("role") == "user" and turn % tool_every == 3:
            args = json.dumps({"skill": "fill-blanks"})
            return Script(chunks=[], tool_calls=[("load_skill", args)], first_delay=delay)
        return Script(chunks=REPLY, first_delay=delay)

    fake.answer = answer
    return fake


async def ours(side: Side, port: int, turns: list[str], settings: Settings) -> None:
    provider = OpenAIProvider.connect("bench", "bench", f"http://127.0.0.1:{port}/v1")
    components = assemble(
        settings,
        InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
        InMemoryTaskQueue(),
        provider,
        SystemClock(),
    )
    user = User(uid="bench")
    conversation_id: str | None = None
    firsts: list[float] = []

    def seen(frame: Frame) -> None:
        if not firsts and isinstance(frame.event, TextEvent):
            firsts.append(time.perf_counter())

    for text in turns:
        firsts.clear()
        began = time.perf_counter()
        sent = await components.agent.send(user, text, conversation_id)
        conversation_id = sent.conversation_id
        assert sent.run is not None
        await sent.run.execute(seen)
        side.first_tokens.append(firsts[0] - began)


def peer(side: Side, port: int, turns: list[str], system: str) -> str | None:
    """The peer's conversation, in its own process; why it was not measured, if not."""
    if not PEERS_PYTHON.exists():
        return f"{PEERS_PYTHON.relative_to(ROOT)} is missing (`make bench` makes it)"
    with tempfile.TemporaryDirectory() as folder:
        system_file, said_file = Path(folder) / "system.txt", Path(folder) / "said.json"
        system_file.write_text(system)
        said_file.write_text(json.dumps(turns))
        done = subprocess.run(
            [
                str(PEERS_PYTHON),
                str(ROOT / "bench" / "peer_conversation.py"),
                f"--peer={side.name}",
                f"--provider=http://127.0.0.1:{port}/v1",
                f"--system={system_file}",
                f"--said={said_file}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1]
    side.first_tokens = [json.loads(line)["ttft"] for line in done.stdout.splitlines()]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--no-peers", action="store_true", help="measure ours alone")
    args = parser.parse_args()
    turns = said(args.turns)
    settings = Settings()
    print(
        f"{args.turns} turns (a tool call first every fifth, ours); history window "
        f"{settings.history_messages} messages moving {settings.history_step} at once; "
        f"modelled first token {PREFILL_BASE * 1000:.0f} ms + "
        f"{PREFILL_PER_TOKEN * 1e6:.0f} µs per uncached input token; "
        f"cached input at {CACHED_PRICE:.0%} of the price"
    )
    sides: list[Side] = []
    # Ours, and ours with the window that moved one message a turn (before issue 51).
    for name, configured in (
        ("ours", settings),
        ("ours, window moving one at a time", replace(settings, history_step=1)),
    ):
        fake = caching_fake(5)  # each side has a fake (and a cache) of its own
        with ServerThread(fake.app) as server:
            side = Side(name, fake)
            asyncio.run(ours(side, server.port, turns, configured))
            sides.append(side)
    if not args.no_peers:
        system = load_prompt("base", settings.prompts)
        for name in ("agents", "pydantic-ai"):
            fake = caching_fake(None)
            with ServerThread(fake.app) as server:
                side = Side(name, fake)
                why = peer(side, server.port, turns, system)
            if why is None:
                sides.append(side)
            else:
                print(f"{name}: not measured: {why}")
    for side in sides:
        print(side.lines())
    from bench.results import target

    share = {s.name: extending(s.fake.requests, "openai") for s in sides}
    first = sides[0]
    cached = sum(r.cached_tokens for r in first.reads) / sum(r.input_tokens for r in first.reads)
    target(
        f"prompt cache: consecutive requests that extend the one before, {args.turns} turns",
        f"{share[first.name]:.1%} (cached {cached:.1%} of input tokens)",
        ">= 80%",
        share[first.name] >= 0.8,
        ", ".join(f"{name} {value:.1%}" for name, value in share.items() if name != first.name),
    )


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("prompt_cache"):
        main()
