"""``ModelProvider`` on OpenAI Chat Completions streaming (the only module importing ``openai``).

Chat Completions is the widest-compatible wire format, so ``OPENAI_BASE_URL`` can
point at any OpenAI-compatible server. The chat request goes through our own client
(``wire``); the SDK serves the rest (voice clips are transcribed here,
``OpenAITranscriber`` on ``audio.transcriptions``, ``OpenAIModerator`` on ``moderations``
and ``shared/voice/openai_voice.py``)
and is imported only when one of those is first used: ``import openai`` weighs on an
instance's cold start (bench/cold_start.py), which a text request never needs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from shared.errors import (
    IncompleteResponse,
    ProviderError,
)
from shared.llm.base import (
    CUT_OFF,
    NO_KEY,
    ChatMessage,
    Finish,
    ImagePart,
    ModelEvent,
    ModelRequest,
    ProviderName,
    TextDelta,
    ToolCallRequest,
    ToolSpec,
    relay,
    sse_json,
    sse_lines,
    status_error,
    transport_error,
    unforeseen_error,
)
from shared.llm.moderation import CATEGORIES, Category, Verdict, verdict_of
from shared.llm.transcribe import Clip, Transcribed, TranscriptionEvent, estimated_usage
from shared.llm.wire import (
    WireClient,
    WireError,
    WireStatusError,
    WireTransportError,
    encode_json,
)
from shared.schemas.documents import ModelFinishReason, Usage

if TYPE_CHECKING:
    from openai import AsyncOpenAI

DEFAULT_BASE_URL = "https://api.openai.com/v1"

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
        body["tools"] = _wire_tools(request.tools)
    if request.max_tokens is not None:
        body["max_completion_tokens"] = request.max_tokens
    if request.cache_key is not None:
        # OpenAI caches a prompt's prefix by itself; the key sends one conversation's
        # requests to the same cache (docs/concepts/prompt-cache.md).
        body["prompt_cache_key"] = request.cache_key
    return body


def _wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


class _RequestEncoder:
    """A request's JSON, its tools' part encoded once for the tool set it is given
    (the registry's one tuple, kept here so that ``is`` can tell it again): the tools'
    schemas are many nested objects, whose ``json.dumps`` on every request was a
    visible part of the time to first token (bench/stream_overhead.py (a)). The bytes
    are those of ``json.dumps(_wire_request(...))``, tools last."""

    def __init__(self) -> None:
        self._tools: tuple[Sequence[ToolSpec], bytes] | None = None

    def encode(self, model: str, request: ModelRequest) -> bytes:
        if not request.tools:
            return encode_json(_wire_request(model, request))
        kept = self._tools
        if kept is None or kept[0] is not request.tools:
            kept = self._tools = (request.tools, encode_json(_wire_tools(request.tools)))
        head = encode_json(_wire_request(model, replace(request, tools=())))
        return head[:-1] + b',"tools":' + kept[1] + b"}"


def sdk_failures() -> tuple[type[Exception], ...]:
    """What the SDK and its transport raise (``translate_error`` makes them ours); asked
    for only once one was raised, so asking imports nothing new."""
    import httpx2
    import openai

    return (openai.OpenAIError, httpx2.HTTPError)


def translate_error(exc: Exception) -> ProviderError:
    """Our exception for one of ``wire``'s, or an ``openai`` or ``httpx2`` one (the
    SDK's transport)."""
    if isinstance(exc, WireStatusError):
        return status_error(exc.status, str(exc))
    if isinstance(exc, WireTransportError):
        return transport_error(exc)
    import httpx2
    import openai

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
            details = usage.get("prompt_tokens_details") or {}
            self.usage = Usage(
                input_tokens=usage.get("prompt_tokens") or 0,
                output_tokens=usage.get("completion_tokens") or 0,
                cached_input_tokens=details.get("cached_tokens") or 0,
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


class SdkClient:
    """An ``AsyncOpenAI`` client made (and the SDK imported) on first use; a process
    configured for OpenAI has three (transcription, live audio, speech; moderation too), all on the
    process's one TLS context (``wire.tls_context``)."""

    def __init__(self, api_key: str | None, base_url: str | None, max_retries: int) -> None:
        self._options = (api_key, base_url, max_retries)

    @cached_property
    def sdk(self) -> AsyncOpenAI:
        from openai import AsyncOpenAI

        from shared.llm.transport import client_options

        return AsyncOpenAI(**client_options(*self._options))

    async def aclose(self) -> None:
        if "sdk" in self.__dict__:
            await self.sdk.close()


def connect_client(api_key: str | None, base_url: str | None, max_retries: int) -> SdkClient:
    """The SDK's client, made when first used (see ``SdkClient``)."""
    return SdkClient(api_key, base_url, max_retries)


class OpenAIProvider:
    """Streams Chat Completions, assembling tool-call fragments into whole calls.

    Chat Completions keeps no state of its own between turns, so this adapter writes
    no ``ProviderState`` (and, like every adapter, ignores another provider's).
    """

    provider: ProviderName = "openai"

    def __init__(self, client: WireClient, model: str) -> None:
        self._client = client
        self._model = model
        self._encoder = _RequestEncoder()

    @classmethod
    def connect(
        cls, model: str, api_key: str | None, base_url: str | None, max_retries: int = 2
    ) -> OpenAIProvider:
        headers = {"Authorization": f"Bearer {api_key or NO_KEY}"}
        return cls(WireClient(base_url or DEFAULT_BASE_URL, headers, max_retries), model)

    @property
    def label(self) -> str:
        return self._model

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        # Not through the SDK: it builds a typed ChatCompletionChunk per token and walks
        # its typed arguments field by field against their TypedDicts, many times our
        # CPU per token (bench/provider_overhead.py); see ``wire`` for the rest.
        @asynccontextmanager
        async def opened() -> AsyncIterator[AsyncIterator[str]]:
            body = self._encoder.encode(self._model, request)
            async with self._client.stream("/chat/completions", body) as chunks:
                yield sse_lines(chunks)

        return relay(opened, _StreamState(), (WireError,), translate_error)

    async def aclose(self) -> None:
        await self._client.aclose()


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

    def __init__(self, client: SdkClient, model: str) -> None:
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
        transcriptions = self._client.sdk.audio.transcriptions
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
        except sdk_failures() as exc:
            raise translate_error(exc) from exc
        raise IncompleteResponse("The transcription was cut off before it finished.")

    async def aclose(self) -> None:
        await self._client.aclose()


MODERATION_MODEL = "omni-moderation-latest"
"""OpenAI's moderation model that reads images as well as text."""


def _category(name: str) -> Category | None:
    """Ours of one of OpenAI's category names (``self-harm/intent`` is ``self_harm``)."""
    head = name.partition("/")[0].replace("-", "_")
    return next((c for c in CATEGORIES if c == head), None)


class OpenAIModerator:
    """``POST /v1/moderations`` through the SDK (no hot path: one call a turn, and one
    a sentence of a reply), text and images in one request."""

    def __init__(self, client: SdkClient, model: str = MODERATION_MODEL) -> None:
        self._client = client
        self._model = model

    @classmethod
    def connect(
        cls,
        api_key: str | None,
        base_url: str | None,
        model: str = MODERATION_MODEL,
        max_retries: int = 2,
    ) -> OpenAIModerator:
        return cls(connect_client(api_key, base_url, max_retries), model)

    @property
    def label(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return "openai"

    async def judge(self, text: str, images: Sequence[ImagePart] = ()) -> Verdict:
        parts: list[Any] = [{"type": "text", "text": text}] if text else []
        parts += [
            {"type": "image_url", "image_url": {"url": f"data:{i.media_type};base64,{i.data}"}}
            for i in images
        ]
        if not parts:
            return verdict_of(())
        try:
            answer = await self._client.sdk.moderations.create(model=self._model, input=parts)
        except sdk_failures() as exc:
            raise translate_error(exc) from exc
        found: list[Category] = []
        for result in answer.results:
            flags = result.categories.model_dump(by_alias=True)
            found += [c for name, on in flags.items() if on and (c := _category(name))]
        return verdict_of(found)
