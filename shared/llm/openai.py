"""``ModelProvider`` on OpenAI Chat Completions streaming (the only module importing ``openai``).

Chat Completions is the widest-compatible wire format, so ``OPENAI_BASE_URL`` can
point at any OpenAI-compatible server. Voice clips are transcribed here too
(``OpenAITranscriber``, on ``audio.transcriptions``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI

from shared.errors import (
    IncompleteResponse,
    ProviderError,
)
from shared.llm.base import (
    CUT_OFF,
    ChatMessage,
    Finish,
    ModelEvent,
    ModelRequest,
    ProviderName,
    TextDelta,
    ToolCallRequest,
    client_options,
    lines_of,
    relay,
    sse_json,
    status_error,
    transport_error,
    unforeseen_error,
)
from shared.llm.transcribe import Clip, Transcribed, TranscriptionEvent, estimated_usage
from shared.schemas.documents import ModelFinishReason, Usage

_FINISH_REASONS: dict[str, ModelFinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    if message.images:
        parts: list[dict[str, Any]] = []
        if message.text:
            parts.append({"type": "text", "text": message.text})
        parts.extend(
            {
                "type": "image_url",
                "image_url": {"url": f"data:{image.media_type};base64,{image.data}"},
            }
            for image in message.images
        )
        return {"role": message.role, "content": parts}
    wire: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.tool_calls:
        wire["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
        if not message.text:
            wire["content"] = None
    return wire


def _wire_request(model: str, request: ModelRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": request.system},
            *(_wire_message(m) for m in request.messages),
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    return body


# What the SDK and its transport raise (``translate_error`` makes them ours).
FAILURES = (openai.OpenAIError, httpx2.HTTPError)


def translate_error(exc: Exception) -> ProviderError:
    """Our exception for an ``openai`` or ``httpx2`` one (the SDK's transport)."""
    if isinstance(exc, openai.APIStatusError):  # RateLimitError (429) included
        return status_error(exc.status_code, f"{exc.status_code}: {exc.message}")
    if isinstance(exc, (openai.APIConnectionError, httpx2.TransportError)):
        return transport_error(exc)
    return unforeseen_error(exc)


@dataclass
class _ToolCallBuffer:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _StreamState:
    """What a Chat Completions stream has said so far (fed one SSE line at a time)."""

    def __init__(self) -> None:
        self.calls: dict[int, _ToolCallBuffer] = {}
        self.finish: ModelFinishReason | None = None
        self.usage = Usage()

    def feed(self, line: str) -> list[TextDelta]:
        chunk = sse_json(line)
        if chunk is None:
            return []
        if "error" in chunk:
            message = (chunk["error"] or {}).get("message", "unknown error")
            raise ProviderError(
                "The model provider failed in the middle of the reply; please try again.",
                detail=str(message),
            )
        usage = chunk.get("usage")
        if usage:
            self.usage = Usage(
                input_tokens=usage.get("prompt_tokens", 0),
                output_tokens=usage.get("completion_tokens", 0),
            )
        texts = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                texts.append(TextDelta(delta["content"]))
            for fragment in delta.get("tool_calls") or ():
                buffer = self.calls.setdefault(fragment.get("index", 0), _ToolCallBuffer())
                buffer.id = fragment.get("id") or buffer.id
                function = fragment.get("function") or {}
                buffer.name = function.get("name") or buffer.name
                buffer.arguments.append(function.get("arguments") or "")
            reason = choice.get("finish_reason")
            if reason is not None:
                self.finish = _FINISH_REASONS.get(reason, "stop")
        return texts

    def ending(self) -> Iterator[ModelEvent]:
        if self.finish is None:
            raise IncompleteResponse(CUT_OFF)
        for index in sorted(self.calls):
            buffer = self.calls[index]
            yield ToolCallRequest(
                buffer.id or f"call_{index}", buffer.name, "".join(buffer.arguments)
            )
        yield Finish(self.finish, self.usage)


def connect_client(api_key: str | None, base_url: str | None, max_retries: int) -> AsyncOpenAI:
    """An OpenAI client; a process configured for OpenAI makes four at start-up (the
    model, transcription, live audio, speech), all on the process's one TLS context
    (``transport.tls_context``)."""
    return AsyncOpenAI(**client_options(api_key, base_url, max_retries))


class OpenAIProvider:
    """Streams Chat Completions, assembling tool-call fragments into whole calls.

    Chat Completions keeps no state of its own between turns, so this adapter writes
    no ``ProviderState`` (and, like every adapter, ignores another provider's).
    """

    provider: ProviderName = "openai"

    def __init__(self, client: AsyncOpenAI, model: str) -> None:
        self._client = client
        self._model = model

    @classmethod
    def connect(
        cls, model: str, api_key: str | None, base_url: str | None, max_retries: int = 2
    ) -> OpenAIProvider:
        client = connect_client(api_key, base_url, max_retries)
        # The SDK imports its chat resource on first use: ~38 ms of CPU that would
        # otherwise fall on an instance's first request (bench/cold_start.py).
        _ = client.chat.completions.with_streaming_response
        return cls(client, model)

    @property
    def label(self) -> str:
        return self._model

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        # The SDK still builds the request, authenticates, retries and raises on an
        # error status; we read the SSE lines ourselves because building a typed
        # ChatCompletionChunk per token costs ~200 µs, which caps one process at a
        # few thousand tokens a second (see bench/stream_overhead.py).
        def opened() -> AbstractAsyncContextManager[AsyncIterator[str]]:
            body = _wire_request(self._model, request)
            # Everything but the model goes in ``extra_body``, which the SDK sends as
            # given: its typed arguments are walked field by field against their
            # TypedDicts first (the system prompt, history and every tool's schema),
            # ~0.8 ms of CPU per request here, ~8 % of a short stream's api CPU (py-spy).
            return lines_of(
                self._client.chat.completions.with_streaming_response.create(
                    model=self._model, messages=(), stream=True, extra_body=body
                )
            )

        return relay(opened, _StreamState(), FAILURES, translate_error)

    async def aclose(self) -> None:
        await self._client.close()


def _transcript_usage(usage: Any, seconds: float) -> Usage:
    """What a transcription cost: its tokens, or its seconds of audio (``whisper-1``
    bills by duration) at ``AUDIO_TOKENS_PER_SECOND``."""
    if getattr(usage, "type", None) == "tokens":
        return Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
    return estimated_usage(getattr(usage, "seconds", None) or seconds)


class OpenAITranscriber:
    """``audio.transcriptions``: streamed (``transcript.text.delta`` events, then
    ``transcript.text.done``) by the ``gpt-4o…-transcribe`` models; ``whisper-1``,
    which cannot stream, answers in one piece."""

    def __init__(self, client: AsyncOpenAI, model: str) -> None:
        self._client = client
        self._model = model

    @classmethod
    def connect(
        cls, model: str, api_key: str | None, base_url: str | None, max_retries: int = 2
    ) -> OpenAITranscriber:
        return cls(connect_client(api_key, base_url, max_retries), model)

    @property
    def label(self) -> str:
        return self._model

    @property
    def streams(self) -> bool:
        return not self._model.startswith("whisper")

    async def transcribe(self, clip: Clip) -> AsyncGenerator[TranscriptionEvent, None]:
        upload = (clip.name, clip.data, clip.media_type)
        transcriptions = self._client.audio.transcriptions
        try:
            if not self.streams:
                whole = await transcriptions.create(
                    model=self._model, file=upload, response_format="json"
                )
                usage = _transcript_usage(whole.usage, clip.duration_seconds)
                yield Transcribed(whole.text.strip(), usage)
                return
            stream = await transcriptions.create(
                model=self._model, file=upload, response_format="json", stream=True
            )
            async for event in stream:
                if event.type == "transcript.text.delta":
                    yield TextDelta(event.delta)
                elif event.type == "transcript.text.done":
                    usage = _transcript_usage(event.usage, clip.duration_seconds)
                    yield Transcribed(event.text.strip(), usage)
                    return
        except FAILURES as exc:
            raise translate_error(exc) from exc
        raise IncompleteResponse("The transcription was cut off before it finished.")

    async def aclose(self) -> None:
        await self._client.close()
