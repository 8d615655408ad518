"""``ModelProvider`` on Anthropic Messages streaming, over ``wire`` (not the SDK).

Tool calls are ``tool_use`` blocks whose input streams as ``input_json_delta``
fragments; results go back as ``tool_result`` blocks in the next user turn (all the
results of one step in one turn, before any text, as the API requires). Thinking
blocks and their signatures are this provider's opaque state: kept whole, in order,
and put back at the head of the same assistant turn, unchanged.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from shared.errors import (
    IncompleteResponse,
    ProviderError,
)
from shared.llm.base import (
    CUT_OFF,
    NO_KEY,
    ChatMessage,
    Finish,
    ModelEvent,
    ModelRequest,
    ProviderName,
    TextDelta,
    ToolCallRequest,
    bounded_state,
    merged_turns,
    relay,
    sse_json,
    sse_lines,
    status_error,
    transport_error,
    unforeseen_error,
)
from shared.llm.wire import WireClient, WireError, WireStatusError, WireTransportError
from shared.schemas.documents import ModelFinishReason, Usage

DEFAULT_MAX_TOKENS = 4096
DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
"""The Messages API version asked for (``anthropic-version``), as the SDK asks."""

_STOP_REASONS: dict[str, ModelFinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

# Blocks the model writes that we do not model; they travel as opaque state.
_OPAQUE_BLOCKS = ("thinking", "redacted_thinking")


def _input_of(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object ``tool_use.input`` must be (``{}`` if malformed:
    the model has already been told its call could not be read)."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _content(message: ChatMessage) -> list[dict[str, Any]]:
    """The blocks of one normalised message."""
    if message.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.text,
        }
        if message.is_error:
            block["is_error"] = True
        return [block]
    blocks: list[dict[str, Any]] = []
    state = message.state_for("anthropic")
    if state is not None:
        blocks.extend(json.loads(state))
    if message.text:  # the API refuses empty text blocks
        blocks.append({"type": "text", "text": message.text})
    blocks.extend(
        {
            "type": "image",
            "source": {"type": "base64", "media_type": image.media_type, "data": image.data},
        }
        for image in message.images
    )
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _input_of(c.arguments)}
        for c in message.tool_calls
    )
    return blocks


CACHE_POINT = {"type": "ephemeral"}
"""A prompt-cache breakpoint: the prefix up to and including its block is cached (five
minutes, renewed by each read), and read back, at a tenth of the price, by any later
request that starts with it."""

_NO_CACHE_POINT = ("thinking", "redacted_thinking")
"""Blocks the API refuses a breakpoint on (a thinking block is cached with its turn)."""


def _marked(block: dict[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": CACHE_POINT}


def _mark_turn(turn: dict[str, Any]) -> None:
    """A breakpoint on ``turn``'s last block that may carry one."""
    blocks = turn["content"]
    for index in range(len(blocks) - 1, -1, -1):
        if blocks[index].get("type") not in _NO_CACHE_POINT:
            blocks[index] = _marked(blocks[index])
            return


def _wire_request(model: str, max_tokens: int, request: ModelRequest) -> dict[str, Any]:
    """The Messages request, with its prompt-cache breakpoints (at most four): the tools'
    and the system prompt's, which hold for the whole conversation; the newest turn's,
    which the next request extends (its reply, its results or the next question follow
    it); and the one before it but one, where the previous request's newest turn ended,
    so that request's cache is read even when this one added more blocks than the
    API looks back over (20)."""
    turns = merged_turns(request.messages, _content, assistant="assistant", key="content")
    if turns:
        _mark_turn(turns[-1])
    if len(turns) >= 3:
        _mark_turn(turns[-3])
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens or max_tokens,
        "messages": turns,
        "stream": True,
    }
    if request.system:
        body["system"] = [_marked({"type": "text", "text": request.system})]
    if request.tools:
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        tools[-1] = _marked(tools[-1])
        body["tools"] = tools
    return body


def translate_error(exc: Exception) -> ProviderError:
    """Our exception for one of ``wire``'s."""
    if isinstance(exc, WireStatusError):  # 429 and 529 (overloaded) included
        return status_error(exc.status, str(exc))
    if isinstance(exc, WireTransportError):
        return transport_error(exc)
    return unforeseen_error(exc)


def _stream_error(error: dict[str, Any]) -> ProviderError:
    """Our exception for an ``error`` event sent in the middle of a stream."""
    kind, detail = str(error.get("type")), f"{error.get('type')}: {error.get('message')}"
    if kind == "rate_limit_error":
        return status_error(429, detail)
    if kind in ("overloaded_error", "api_error"):
        return status_error(529 if kind == "overloaded_error" else 500, detail)
    return ProviderError(
        "The model provider failed in the middle of the reply; please try again.", detail=detail
    )


@dataclass
class _Block:
    """One content block as it streams: text (sent on at once), a tool call whose
    input arrives in fragments, or an opaque one (thinking) kept for next time."""

    kind: str
    start: dict[str, Any]
    fragments: list[str] = field(default_factory=list)
    deltas: list[dict[str, Any]] = field(default_factory=list)


class _StreamState:
    """What a Messages stream has said so far (fed one SSE line at a time)."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.stop: ModelFinishReason | None = None
        self.stopped = False  # message_stop arrived
        self.input_tokens = 0
        self.cached_tokens = 0
        self.output_tokens = 0

    def feed(self, line: str) -> tuple[TextDelta, ...]:
        event = sse_json(line)  # "event:" lines say what the data says: skipped
        if event is None:
            return ()
        kind = event.get("type")
        if kind == "content_block_delta":  # the hot path: one per token
            delta = event["delta"]
            if delta.get("type") == "text_delta":
                return (TextDelta(delta["text"]),) if delta["text"] else ()
            block = self.blocks.get(event["index"])
            if block is None:
                pass
            elif block.kind == "tool_use":
                block.fragments.append(delta.get("partial_json") or "")
            elif block.kind in _OPAQUE_BLOCKS:
                block.deltas.append(delta)
        elif kind == "content_block_start":
            start = event["content_block"]
            self.blocks[event["index"]] = _Block(start.get("type", ""), start)
        elif kind == "message_start":
            usage = (event.get("message") or {}).get("usage") or {}
            self._count(usage)
        elif kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason is not None:
                self.stop = _STOP_REASONS.get(reason, "stop")
            self._count(event.get("usage") or {})
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise _stream_error(event.get("error") or {})
        return ()

    def _count(self, usage: dict[str, Any]) -> None:
        # message_delta's counts are cumulative. ``input_tokens`` counts only what follows
        # the last cache breakpoint; the cache's writes and reads are counted apart.
        given = sum(
            usage.get(key) or 0
            for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        self.input_tokens = max(self.input_tokens, given)
        self.cached_tokens = max(self.cached_tokens, usage.get("cache_read_input_tokens") or 0)
        self.output_tokens = max(self.output_tokens, usage.get("output_tokens") or 0)

    def calls(self) -> list[ToolCallRequest]:
        calls = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.kind == "tool_use":
                arguments = "".join(block.fragments) or json.dumps(block.start.get("input") or {})
                call_id = block.start.get("id") or f"toolu_{index}"
                calls.append(ToolCallRequest(call_id, block.start.get("name", ""), arguments))
        return calls

    def opaque(self) -> str:
        """The thinking blocks, whole and in order, as the API wants them back."""
        kept = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.kind not in _OPAQUE_BLOCKS:
                continue
            whole = dict(block.start)
            for delta in block.deltas:
                for key in ("thinking", "signature", "data"):
                    if key in delta:
                        whole[key] = whole.get(key, "") + delta[key]
            kept.append(whole)
        return json.dumps(kept) if kept else ""

    def ending(self) -> Iterator[ModelEvent]:
        if self.stop is None or not self.stopped:
            raise IncompleteResponse(CUT_OFF)
        yield from self.calls()
        usage = Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_input_tokens=self.cached_tokens,
        )
        yield Finish(self.stop, usage, bounded_state("anthropic", self.opaque()))


class AnthropicProvider:
    """Streams Anthropic Messages, assembling ``tool_use`` input into whole calls."""

    provider: ProviderName = "anthropic"

    def __init__(
        self, client: WireClient, model: str, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> None:
        self._client = client
        self._model = model
        self._max_tokens = max_tokens

    @classmethod
    def connect(
        cls, model: str, api_key: str | None, base_url: str | None, max_retries: int = 2
    ) -> AnthropicProvider:
        headers = {"x-api-key": api_key or NO_KEY, "anthropic-version": API_VERSION}
        return cls(WireClient(base_url or DEFAULT_BASE_URL, headers, max_retries), model)

    @property
    def label(self) -> str:
        return self._model

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        # Not through the SDK, as OpenAI's (``wire``): its typed stream (an event
        # object per token, then our translation), and even its raw response read
        # through httpx2, httpcore2 and anyio, cost several times our CPU a token
        # (bench/provider_overhead.py). The SDK is no longer imported at all.
        @asynccontextmanager
        async def opened() -> AsyncIterator[AsyncIterator[str]]:
            body = _wire_request(self._model, self._max_tokens, request)
            async with self._client.stream("/v1/messages", body) as chunks:
                yield sse_lines(chunks)

        return relay(opened, _StreamState(), (WireError,), translate_error)

    async def aclose(self) -> None:
        await self._client.aclose()
