"""The OpenAI adapter, with the real ``openai`` client against our fake server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from shared.errors import (
    IncompleteResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
)
from shared.llm.base import (
    ChatMessage,
    Finish,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ToolCallRequest,
    ToolSpec,
)
from shared.llm.openai import OpenAIProvider
from tests.fakes.openai_server import FakeOpenAI, Script, ServerThread


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    with ServerThread(fake.app) as server:
        fake.base_url = f"http://127.0.0.1:{server.port}/v1"  # type: ignore[attr-defined]
        yield fake


def provider(fake: FakeOpenAI) -> OpenAIProvider:
    return OpenAIProvider.connect("fake-model", "test-key", fake.base_url, max_retries=0)  # type: ignore[attr-defined]


async def collect(fake: FakeOpenAI, text: str, **request: object) -> list[ModelEvent]:
    model_request = ModelRequest(system="sys", messages=[ChatMessage("user", text)], **request)  # type: ignore[arg-type]
    return [event async for event in provider(fake).stream(model_request)]


async def test_openai_streams_text_then_finish(fake: FakeOpenAI) -> None:
    fake.script("plain", Script(chunks=["Hi", " there"]))
    events = await collect(fake, "plain")
    assert events[:2] == [TextDelta("Hi"), TextDelta(" there")]
    assert isinstance(events[-1], Finish) and events[-1].reason == "stop"
    assert events[-1].usage.output_tokens == 2
    sent = fake.requests_for("plain")[-1]
    assert sent["model"] == "fake-model" and sent["stream"] is True
    assert sent["messages"][0] == {"role": "system", "content": "sys"}


async def test_openai_assembles_tool_call_fragments(fake: FakeOpenAI) -> None:
    args = json.dumps({"topic": "fractions", "level": 3})
    fake.script(
        "tools", Script(chunks=["Let me"], tool_calls=[("create_lesson", args), ("get_time", "{}")])
    )
    tool = ToolSpec("create_lesson", "Create a lesson", {"type": "object", "properties": {}})
    events = await collect(fake, "tools", tools=[tool])
    calls = [e for e in events if isinstance(e, ToolCallRequest)]
    assert calls == [
        ToolCallRequest("call_0", "create_lesson", args),
        ToolCallRequest("call_1", "get_time", "{}"),
    ]
    assert isinstance(events[-1], Finish) and events[-1].reason == "tool_calls"
    assert fake.requests_for("tools")[-1]["tools"][0]["function"]["name"] == "create_lesson"


async def test_openai_sends_tool_history_in_wire_format(fake: FakeOpenAI) -> None:
    call = ToolCallRequest("call_9", "get_time", "{}")
    messages = [
        ChatMessage("user", "what time"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", '{"time": "noon"}', tool_call_id="call_9", name="get_time"),
        ChatMessage("user", "history"),
    ]
    request = ModelRequest(system="sys", messages=messages)
    _ = [e async for e in provider(fake).stream(request)]
    wire = fake.requests_for("history")[-1]["messages"]
    assert wire[2]["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}
    assert wire[2]["content"] is None
    assert wire[3] == {"role": "tool", "tool_call_id": "call_9", "content": '{"time": "noon"}'}


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, ProviderUnavailable),
        (503, ProviderUnavailable),
        (429, ProviderRateLimited),
        (400, ProviderRejected),
        (401, ProviderRejected),
    ],
)
async def test_openai_http_errors_are_translated(
    fake: FakeOpenAI, status: int, error: type[Exception]
) -> None:
    fake.script(f"status {status}", Script(status=status))
    with pytest.raises(error) as raised:
        await collect(fake, f"status {status}")
    # What the provider said (it may quote part of a key) stays out of the message.
    assert "scripted failure" not in raised.value.message  # type: ignore[attr-defined]
    assert "scripted failure" in (raised.value.detail or "")  # type: ignore[attr-defined]


async def test_openai_mid_stream_disconnect_is_a_provider_failure(fake: FakeOpenAI) -> None:
    fake.script("drop", Script(chunks=["a", "b", "c"], disconnect_after=2))
    received: list[ModelEvent] = []
    with pytest.raises(ProviderUnavailable):
        async for event in provider(fake).stream(
            ModelRequest("sys", [ChatMessage("user", "drop")])
        ):
            received.append(event)
    assert received == [TextDelta("a"), TextDelta("b")]


async def test_openai_error_inside_the_stream_is_a_provider_failure(fake: FakeOpenAI) -> None:
    fake.script("inner error", Script(chunks=["a", "b"], error_after=1))
    with pytest.raises(ProviderError) as raised:
        await collect(fake, "inner error")
    assert "The server had an error" not in raised.value.message
    assert raised.value.detail == "The server had an error"


async def test_openai_stream_without_finish_reason_is_incomplete(fake: FakeOpenAI) -> None:
    fake.script("nofinish", Script(chunks=["a"], finish=False))
    with pytest.raises(IncompleteResponse):
        await collect(fake, "nofinish")


async def test_openai_unreachable_server_is_unavailable() -> None:
    unreachable = OpenAIProvider.connect("m", "k", "http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(ProviderUnavailable):
        _ = [e async for e in unreachable.stream(ModelRequest("s", [ChatMessage("user", "x")]))]


def test_openai_request_bytes_are_the_plain_encoding_with_the_tools_encoded_once() -> None:
    """The encoder's bytes are ``json.dumps`` of the whole request, tools last, whether
    its tools' part was just encoded or kept; another tool set is encoded afresh."""
    from shared.llm import openai
    from shared.llm.wire import encode_json

    schema = {"type": "object", "properties": {"n": {"type": "integer", "description": "é"}}}
    tools = (ToolSpec("count", "Count “things”", schema), ToolSpec("get_time", "Time", {}))
    others = (ToolSpec("other", "Another", {"type": "object"}),)
    encoder = openai._RequestEncoder()
    for tool_set, text in [(tools, "a"), (tools, "b\n\u2028"), (others, "c"), ((), "d")]:
        request = ModelRequest(system="sys", messages=[ChatMessage("user", text)], tools=tool_set)
        sent = encoder.encode("m", request)
        assert sent == encode_json(openai._wire_request("m", request))
        assert json.loads(sent)["messages"][1]["content"] == text
