"""The prompt's prefix holds from one model request to the next (issue 51): the history
window moves in steps, and each provider is given its cache hints, judged at the fake
providers' wire over a long conversation (the fakes model each provider's cache)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest

from shared.agent.prompt.history import build_history, window, window_start
from shared.egress.gate import charged
from shared.llm.anthropic import AnthropicProvider
from shared.llm.gemini import GeminiProvider
from shared.llm.openai import OpenAIProvider
from shared.schemas.documents import ContentPart, Message, ToolCall, ToolResult, Usage
from tests.fakes import anthropic_server, gemini_server, openai_server
from tests.fakes.openai_server import Script, ServerThread
from tests.fakes.prompt_cache import PromptCache, Wire, extending, head
from tests.unit.helpers import ALICE, make_service, run_to_end
from tests.unit.test_loop import registry

TURNS = 32

# -- the window ---------------------------------------------------------------------


def test_window_start_moves_only_in_steps_and_keeps_at_least_the_limit() -> None:
    for limit, step in ((20, 10), (6, 4), (5, 1)):
        starts = [window_start(total, limit, step) for total in range(0, 120)]
        for total, start in enumerate(starts):
            assert start % step == 0
            assert min(total, limit) <= total - start <= limit + step - 1
        moves = sum(1 for a, b in pairwise(starts) if a != b)
        assert moves == (120 - 1 - limit) // step  # one move per `step` messages


def _message(n: int, role: str, parts: list[ContentPart]) -> Message:
    return Message.model_validate(
        {"id": f"m{n}", "role": role, "createdAt": "2026-01-01T00:00:00Z", "status": "complete"}
        | {"content": [p.model_dump(by_alias=True, exclude_none=True) for p in parts]}
    )


def _call(call_id: str, name: str, execution: str, status: str) -> ContentPart:
    call = ToolCall.model_validate(
        {"id": call_id, "name": name, "argsJson": "{}", "displayText": name}
        | {"execution": execution, "status": status}
    )
    return ContentPart(type="tool_call", tool_call=call)


def _result(call_id: str, output: str) -> ContentPart:
    result = ToolResult(tool_call_id=call_id, output_json=output, status="ok")
    return ContentPart(type="tool_result", tool_result=result)


def conversation(turns: int, tasks: bool = True) -> list[Message]:
    """``turns`` exchanges; every third reply calls a tool (its result inline), and (with
    ``tasks``) every fifth a task, whose result comes (a ``tool`` message) two turns
    later, in place of the note that it is still running."""
    messages: list[Message] = []
    late: dict[int, str] = {}
    for n in range(turns):
        messages.append(_message(len(messages), "user", [ContentPart.of_text(f"q{n}")]))
        parts = [ContentPart.of_text(f"a{n}")]
        if n % 3 == 0:
            parts += [_call(f"c{n}", "echo", "inline", "complete"), _result(f"c{n}", '"ok"')]
        if tasks and n % 5 == 0:
            parts += [_call(f"t{n}", "create_lesson", "task", "queued")]
            late[n + 2] = f"t{n}"
        messages.append(_message(len(messages), "assistant", parts))
        if n in late:
            messages.append(_message(len(messages), "tool", [_result(late.pop(n), '"made"')]))
    return messages


def test_the_step_window_holds_all_the_window_of_the_last_messages_held() -> None:
    # What the model saw of the last `limit` messages (the window before issue 51), it
    # still sees, at the end of its history: the last turns, calls still waiting (open
    # questions and approvals are such calls) and their results.
    messages = conversation(40)
    for end in range(1, len(messages) + 1):
        seen = messages[:end]
        before = build_history(seen, 20)
        now = build_history(seen, 20, step=10)
        assert now[len(now) - len(before) :] == before
        assert len(window(seen, 20, step=10)) >= min(end, 20)


def test_the_window_counts_archived_messages_so_a_roll_over_does_not_move_it() -> None:
    messages = conversation(40)
    whole = build_history(messages, 20, step=10)
    start = window_start(len(messages), 20, 10)
    for archived in (0, start // 2, start):  # roll-over keeps the window live
        live = messages[archived:]
        assert build_history(live, 20, offset=archived, step=10) == whole


def test_the_character_cut_moves_in_steps_too() -> None:
    # (A task's result replacing its note changes an earlier turn, with reason: none here.)
    messages = conversation(40, tasks=False)
    budget = sum(len(t.text) for t in build_history(messages, 20, step=10)) * 3 // 4
    histories = [
        build_history(messages[:end], 20, budget, step=10) for end in range(30, len(messages))
    ]
    extended = sum(1 for a, b in pairwise(histories) if b[: len(a)] == a)
    assert extended >= 0.8 * (len(histories) - 1)
    assert all(sum(len(t.text) for t in h) <= budget for h in histories)


def test_cached_input_is_charged_at_its_share() -> None:
    usage = Usage(input_tokens=1000, output_tokens=50, cached_input_tokens=800)
    assert charged(usage, 10) == 200 + 80 + 50
    assert charged(usage, 100) == 1050
    assert charged(usage, 0) == 250
    # A provider reporting more cached than input is charged no less than its output.
    assert charged(Usage(input_tokens=10, cached_input_tokens=99), 10) == 1


# -- at the fakes' wire --------------------------------------------------------------


@dataclass
class Provider:
    wire: Wire
    fake: Any
    connect: Callable[[int], Any]


_PROVIDERS = {
    "openai": Provider(
        "openai",
        openai_server.FakeOpenAI,
        lambda port: OpenAIProvider.connect("m", "k", f"http://127.0.0.1:{port}/v1", 0),
    ),
    "anthropic": Provider(
        "anthropic",
        anthropic_server.FakeAnthropic,
        lambda port: AnthropicProvider.connect("m", "k", f"http://127.0.0.1:{port}", 0),
    ),
    "google": Provider(
        "gemini",
        gemini_server.FakeGemini,
        lambda port: GeminiProvider.connect("m", "k", f"http://127.0.0.1:{port}", 0),
    ),
}


@pytest.fixture(params=list(_PROVIDERS))
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Provider, Any, int]]:
    provider = _PROVIDERS[request.param]
    fake = provider.fake()
    fake.cache = PromptCache(provider.wire)
    fake.default = Script(chunks=["A reply ", "of a few ", "words, ", "as a model writes."])
    with ServerThread(fake.app) as server:
        yield provider, fake, server.port


def _breakpoints(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


async def test_a_long_conversation_extends_its_requests_at_the_wire(
    served: tuple[Provider, Any, int],
) -> None:
    provider, fake, port = served
    # Every fourth turn, the model calls a tool before it answers (two requests).
    for n in range(3, TURNS, 4):
        args = json.dumps({"text": f"echo {n}"})
        fake.script(f"turn {n}", Script(tool_calls=[("echo", args)], then=Script(["Done."])))
    service = make_service(provider.connect(port), tools=registry())
    conversation_id = None
    for n in range(TURNS):
        conversation_id, _ = await run_to_end(service, ALICE, f"turn {n}", conversation_id)

    bodies = fake.requests
    assert len(bodies) == TURNS + TURNS // 4
    assert all(head(b, provider.wire) == head(bodies[0], provider.wire) for b in bodies)
    assert extending(bodies, provider.wire) >= 0.8
    if provider.wire == "anthropic":
        assert all(1 <= _breakpoints(b) <= 4 for b in bodies)
    if provider.wire == "openai":
        keys = {b.get("prompt_cache_key") for b in bodies}
        assert len(keys) == 1 and None not in keys
    # What the provider read from its cache is kept on each reply.
    assert conversation_id is not None
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    replies = [m for m in stored.messages if m.role == "assistant"]
    cached = [m.usage.cached_input_tokens for m in replies if m.usage is not None]
    assert len(cached) == TURNS and cached[0] == 0
    assert sum(c > 0 for c in cached) >= 0.8 * TURNS
    assert sum(cached) == sum(r.cached_tokens for r in fake.reads)
