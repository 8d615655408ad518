"""The provider conformance suite: every scenario against every adapter.

Each adapter talks, through its real SDK client, over real HTTP on loopback, to a fake
of its provider that speaks that provider's wire format (SSE as each really streams
it). What an adapter sends is read back by the fake's ``decode`` into neutral terms,
so one expectation covers all three wire formats.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from shared.errors import (
    IncompleteResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
)
from shared.llm.anthropic import AnthropicProvider
from shared.llm.base import (
    ChatMessage,
    Finish,
    ImagePart,
    ModelEvent,
    ModelProvider,
    ModelRequest,
    ProviderState,
    TextDelta,
    ToolCallRequest,
    ToolSpec,
    sse_lines,
)
from shared.llm.gemini import GeminiProvider
from shared.llm.openai import OpenAIProvider
from tests.fakes import anthropic_server, gemini_server, openai_server
from tests.fakes.openai_server import Script, ServerThread

Fake = openai_server.FakeOpenAI | anthropic_server.FakeAnthropic | gemini_server.FakeGemini


@dataclass
class Adapter:
    """One adapter under test, with the fake of its provider."""

    name: str
    fake: Fake
    connect: Callable[[], ModelProvider]
    decode: Callable[[dict[str, Any]], list[tuple[Any, ...]]]

    def sent(self, trigger: str) -> dict[str, Any]:
        """The last request the adapter sent for ``trigger``."""
        return self.fake.requests_for(trigger)[-1]


def _openai(port: int) -> ModelProvider:
    return OpenAIProvider.connect("fake-model", "k", f"http://127.0.0.1:{port}/v1", max_retries=0)


def _anthropic(port: int) -> ModelProvider:
    return AnthropicProvider.connect("fake-model", "k", f"http://127.0.0.1:{port}", max_retries=0)


def _gemini(port: int) -> ModelProvider:
    return GeminiProvider.connect("fake-model", "k", f"http://127.0.0.1:{port}", max_retries=0)


_ADAPTERS: dict[str, tuple[Callable[[], Fake], Callable[[int], ModelProvider], Any]] = {
    "openai": (openai_server.FakeOpenAI, _openai, openai_server.decode),
    "anthropic": (anthropic_server.FakeAnthropic, _anthropic, anthropic_server.decode),
    "google": (gemini_server.FakeGemini, _gemini, gemini_server.decode),
}


@pytest.fixture(scope="module", params=list(_ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    make_fake, connect, decode = _ADAPTERS[request.param]
    fake = make_fake()
    with ServerThread(fake.app) as server:
        yield Adapter(request.param, fake, lambda: connect(server.port), decode)


async def collect(adapter: Adapter, messages: list[ChatMessage], **kw: Any) -> list[ModelEvent]:
    request = ModelRequest(system="sys", messages=messages, **kw)
    return [event async for event in adapter.connect().stream(request)]


def finish_of(events: list[ModelEvent]) -> Finish:
    assert isinstance(events[-1], Finish)
    assert sum(isinstance(e, Finish) for e in events) == 1
    return events[-1]


LESSON = ToolSpec(
    "create_lesson",
    "Create a lesson",
    {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
)
CLOCK = ToolSpec("get_time", "The time", {"type": "object", "properties": {}})


def tiny_png() -> str:
    """A 2×1 PNG made here (red, blue), base64-encoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 2, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00\x00\x00\xff")
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
    return base64.b64encode(png + chunk(b"IEND", b"")).decode()


# -- scenarios ----------------------------------------------------------------------


async def test_provider_streams_plain_text(adapter: Adapter) -> None:
    adapter.fake.script("plain", Script(chunks=["Hi", " there", "!"]))
    events = await collect(adapter, [ChatMessage("user", "plain")])
    assert events[:-1] == [TextDelta("Hi"), TextDelta(" there"), TextDelta("!")]
    finish = finish_of(events)
    assert finish.reason == "stop"
    assert (finish.usage.input_tokens, finish.usage.output_tokens) == (3, 3)
    # The system prompt goes where the provider wants it, once, ahead of the turns.
    assert adapter.decode(adapter.sent("plain")) == [("system", "sys"), ("user", "plain")]


async def test_provider_assembles_one_tool_call(adapter: Adapter) -> None:
    args = {"topic": "fractions", "level": 3}
    adapter.fake.script(
        "one", Script(chunks=["Let me"], tool_calls=[("create_lesson", json.dumps(args))])
    )
    events = await collect(adapter, [ChatMessage("user", "one")], tools=[LESSON])
    calls = [e for e in events if isinstance(e, ToolCallRequest)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("create_lesson", args)]
    assert calls[0].id
    assert events[0] == TextDelta("Let me")
    assert finish_of(events).reason == "tool_calls"
    sent = adapter.decode(adapter.sent("one"))
    assert sent[0] == ("tool", "create_lesson", LESSON.parameters)


async def test_provider_returns_parallel_tool_calls_in_order(adapter: Adapter) -> None:
    adapter.fake.script(
        "parallel",
        Script(
            chunks=[],
            tool_calls=[
                ("create_lesson", '{"topic": "maps"}'),
                ("get_time", "{}"),
                ("create_lesson", '{"topic": "tides"}'),
            ],
        ),
    )
    events = await collect(adapter, [ChatMessage("user", "parallel")], tools=[LESSON, CLOCK])
    calls = [e for e in events if isinstance(e, ToolCallRequest)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("create_lesson", {"topic": "maps"}),
        ("get_time", {}),
        ("create_lesson", {"topic": "tides"}),
    ]
    assert len({c.id for c in calls}) == 3  # ids of our own where the provider sends none
    assert finish_of(events).reason == "tool_calls"
    assert not any(isinstance(e, TextDelta) for e in events)


def _turn(
    call_id: str, name: str, args: dict[str, Any], output: Any, error: bool = False
) -> list[ChatMessage]:
    call = ToolCallRequest(call_id, name, json.dumps(args))
    return [
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", json.dumps(output), tool_call_id=call_id, name=name, is_error=error),
    ]


def expected(adapter: Adapter, messages: list[ChatMessage]) -> list[tuple[Any, ...]]:
    """What the fake should decode from ``messages`` (after the system prompt)."""
    items: list[tuple[Any, ...]] = [("system", "sys")]
    for m in messages:
        if m.role == "tool":
            flag = None if adapter.name == "openai" else m.is_error
            items.append(("result", m.name, json.loads(m.text), flag))
            continue
        if m.text:
            items.append((m.role, m.text))
        items.extend(("image", i.media_type, i.data) for i in m.images)
        items.extend(("call", c.name, json.loads(c.arguments)) for c in m.tool_calls)
    return items


async def test_provider_feeds_a_tool_error_back(adapter: Adapter) -> None:
    adapter.fake.script("failing", Script(chunks=["Sorry, that failed."]))
    history = [
        ChatMessage("user", "failing"),
        *_turn("c1", "create_lesson", {"topic": "x"}, {"error": "No such topic."}, error=True),
    ]
    events = await collect(adapter, history, tools=[LESSON])
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Sorry, that failed."
    sent = adapter.decode(adapter.sent("failing"))
    assert sent[1:] == expected(adapter, history)
    result = sent[-1]
    assert result[2] == {"error": "No such topic."}
    if adapter.name != "openai":  # Chat Completions has no error flag; the others do
        assert result[3] is True


async def test_provider_stream_cut_before_its_stop_event_is_incomplete(adapter: Adapter) -> None:
    adapter.fake.script("cut", Script(chunks=["a", "b"], finish=False))
    received: list[ModelEvent] = []
    with pytest.raises(IncompleteResponse):
        async for event in adapter.connect().stream(
            ModelRequest("s", [ChatMessage("user", "cut")])
        ):
            received.append(event)
    assert received == [TextDelta("a"), TextDelta("b")]


async def test_anthropic_stream_cut_just_before_message_stop_is_incomplete() -> None:
    fake = anthropic_server.FakeAnthropic()
    fake.script("almost", Script(chunks=["a"], stop_event=False))
    with ServerThread(fake.app) as server:
        provider = _anthropic(server.port)
        with pytest.raises(IncompleteResponse):
            _ = [
                e async for e in provider.stream(ModelRequest("s", [ChatMessage("user", "almost")]))
            ]


async def test_provider_dropped_connection_is_unavailable(adapter: Adapter) -> None:
    adapter.fake.script("drop", Script(chunks=["a", "b", "c"], disconnect_after=2))
    received: list[ModelEvent] = []
    with pytest.raises(ProviderUnavailable):
        async for event in adapter.connect().stream(
            ModelRequest("s", [ChatMessage("user", "drop")])
        ):
            received.append(event)
    assert received == [TextDelta("a"), TextDelta("b")]


async def test_provider_error_inside_the_stream_keeps_its_words_out(adapter: Adapter) -> None:
    adapter.fake.script("inner", Script(chunks=["a", "b"], error_after=1))
    with pytest.raises(ProviderError) as raised:
        await collect(adapter, [ChatMessage("user", "inner")])
    assert raised.value.detail
    assert (
        raised.value.detail.lower().split(":")[-1].strip().rstrip(".")
        not in raised.value.message.lower()
    )
    if adapter.name != "openai":  # an overload mid-stream is the provider's trouble
        assert isinstance(raised.value, ProviderUnavailable)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (429, ProviderRateLimited),
        (500, ProviderUnavailable),
        (503, ProviderUnavailable),
        (400, ProviderRejected),
        (401, ProviderRejected),
    ],
)
async def test_provider_http_errors_are_translated(
    adapter: Adapter, status: int, error: type[ProviderError]
) -> None:
    adapter.fake.script(f"status {status}", Script(status=status))
    with pytest.raises(error) as raised:
        await collect(adapter, [ChatMessage("user", f"status {status}")])
    # What the provider said (it may quote part of a key) stays out of the message.
    assert "scripted failure" not in raised.value.message
    assert "scripted failure" in (raised.value.detail or "")
    assert "Spark AI Agent" not in (raised.value.detail or "")


async def test_anthropic_overloaded_is_unavailable() -> None:
    fake = anthropic_server.FakeAnthropic()
    fake.script("busy", Script(status=529))
    with ServerThread(fake.app) as server:
        provider = _anthropic(server.port)
        with pytest.raises(ProviderUnavailable) as raised:
            _ = [e async for e in provider.stream(ModelRequest("s", [ChatMessage("user", "busy")]))]
    assert "529" in (raised.value.detail or "")


async def test_provider_sends_an_image(adapter: Adapter) -> None:
    adapter.fake.script("what is this", Script(chunks=["Two pixels."]))
    image = ImagePart("image/png", tiny_png())
    message = ChatMessage("user", "what is this", images=(image,))
    events = await collect(adapter, [message])
    assert events[0] == TextDelta("Two pixels.")
    assert adapter.decode(adapter.sent("what is this"))[1:] == [
        ("user", "what is this"),
        ("image", "image/png", image.data),
    ]


# Where each provider's wire carries a reply's bound.
_BOUND_FIELD: dict[str, Callable[[dict[str, Any]], Any]] = {
    "openai": lambda body: body.get("max_completion_tokens"),
    "anthropic": lambda body: body.get("max_tokens"),
    "google": lambda body: body.get("generationConfig", {}).get("maxOutputTokens"),
}


async def test_provider_sends_the_replys_bound(adapter: Adapter) -> None:
    """A bounded request (a task tool's, whose reservation is its bound) is cut by the
    provider at that bound: each adapter sends it."""
    adapter.fake.script("bounded", Script(chunks=["Short."]))
    await collect(adapter, [ChatMessage("user", "bounded")], max_tokens=1234)
    assert _BOUND_FIELD[adapter.name](adapter.sent("bounded")) == 1234


def long_history() -> list[ChatMessage]:
    history: list[ChatMessage] = []
    for n in range(12):
        history.append(ChatMessage("user", f"question {n}"))
        if n % 3 == 0:  # two calls in one step, answered in one turn
            a = ToolCallRequest(f"a{n}", "create_lesson", json.dumps({"topic": f"t{n}"}))
            b = ToolCallRequest(f"b{n}", "get_time", "{}")
            history.append(ChatMessage("assistant", f"Working on {n}.", tool_calls=(a, b)))
            history.append(
                ChatMessage("tool", json.dumps({"id": n}), tool_call_id=a.id, name=a.name)
            )
            history.append(
                ChatMessage(
                    "tool",
                    json.dumps({"error": "late"}),
                    tool_call_id=b.id,
                    name=b.name,
                    is_error=True,
                )
            )
        elif n % 3 == 1:
            history.extend(_turn(f"c{n}", "get_time", {}, {"time": f"{n}:00"}))
        history.append(ChatMessage("assistant", f"Answer {n}."))
    history.append(ChatMessage("user", "long history"))
    return history


async def test_provider_sends_a_long_history_with_tool_pairs(adapter: Adapter) -> None:
    adapter.fake.script("long history", Script(chunks=["Done."]))
    history = long_history()
    await collect(adapter, history, tools=[LESSON, CLOCK])
    body = adapter.sent("long history")
    assert adapter.decode(body)[2:] == expected(adapter, history)
    if adapter.name == "anthropic":
        turns = body["messages"]
        # Roles alternate; each step's results open the next user turn, ahead of text.
        assert all(a["role"] != b["role"] for a, b in itertools.pairwise(turns))
        for before, after in itertools.pairwise(turns):
            uses = [b["id"] for b in before["content"] if b["type"] == "tool_use"]
            results = [b["tool_use_id"] for b in after["content"] if b["type"] == "tool_result"]
            assert results == uses
            if results:
                assert all(b["type"] == "tool_result" for b in after["content"][: len(results)])
    if adapter.name == "google":
        contents = body["contents"]
        assert all(a["role"] != b["role"] for a, b in itertools.pairwise(contents))
        for before, after in itertools.pairwise(contents):
            calls = [p["functionCall"]["name"] for p in before["parts"] if "functionCall" in p]
            answers = [
                p["functionResponse"]["name"] for p in after["parts"] if "functionResponse" in p
            ]
            assert answers == calls
    if adapter.name == "openai":
        wire = body["messages"]
        for index, message in enumerate(wire):
            if message["role"] == "tool":
                owner = next(m for m in reversed(wire[:index]) if m["role"] == "assistant")
                assert message["tool_call_id"] in {c["id"] for c in owner["tool_calls"]}


# -- opaque provider state ------------------------------------------------------------


async def test_provider_state_goes_back_unchanged_to_its_own_provider(adapter: Adapter) -> None:
    adapter.fake.script(
        "think",
        Script(chunks=["Checking."], tool_calls=[("get_time", "{}")], thinking=True),
    )
    events = await collect(adapter, [ChatMessage("user", "think")], tools=[CLOCK])
    finish = finish_of(events)
    calls = tuple(e for e in events if isinstance(e, ToolCallRequest))
    if adapter.name == "openai":
        assert finish.state is None  # Chat Completions keeps none
        return
    assert finish.state is not None and finish.state.provider == adapter.name
    adapter.fake.script("again", Script(chunks=["It is noon."]))
    history = [
        ChatMessage("user", "think"),
        ChatMessage("assistant", "Checking.", tool_calls=calls, state=finish.state),
        ChatMessage("tool", '{"time": "noon"}', tool_call_id=calls[0].id, name="get_time"),
        ChatMessage("user", "again"),
    ]
    await collect(adapter, history, tools=[CLOCK])
    body = adapter.sent("again")
    if adapter.name == "anthropic":
        thinking = body["messages"][1]["content"][0]
        assert thinking == {
            "type": "thinking",
            "thinking": anthropic_server.THOUGHT,
            "signature": anthropic_server.SIGNATURE,
        }
    else:
        call_part = next(p for p in body["contents"][1]["parts"] if "functionCall" in p)
        assert call_part["thoughtSignature"] == gemini_server.SIGNATURE


async def test_provider_ignores_another_providers_state(adapter: Adapter) -> None:
    adapter.fake.script("moved", Script(chunks=["Fine."]))
    other = "google" if adapter.name == "anthropic" else "anthropic"
    thinking = [{"type": "thinking", "thinking": "x", "signature": "s"}]
    foreign = ProviderState("anthropic", json.dumps(thinking))
    if other == "google":
        foreign = ProviderState("google", json.dumps({"text": "sig", "calls": []}))
    history = [
        ChatMessage("user", "hello"),
        ChatMessage("assistant", "Hello!", state=foreign),
        ChatMessage("user", "moved"),
    ]
    await collect(adapter, history)
    sent = adapter.decode(adapter.sent("moved"))
    assert sent == expected(adapter, history)
    assert not any(item[0] == "state" for item in sent)


async def test_sse_lines_are_whole_whatever_the_chunks() -> None:
    """A chunk may end inside a line, a ``\\r\\n`` or a UTF-8 character."""
    body = 'data: {"a": "café"}\r\n\r\ndata: 2\n\ndata: tail'.encode()

    async def chunks(size: int) -> AsyncIterator[bytes]:
        for start in range(0, len(body), size):
            yield body[start : start + size]

    for size in (1, 2, 3, 7, len(body)):
        lines = [line async for line in sse_lines(chunks(size))]
        assert lines == ['data: {"a": "café"}', "", "data: 2", "", "data: tail"], size
