"""``ModelProvider`` on the Gemini API's streaming (the only module importing ``google.genai``).

Tool calls are ``functionCall`` parts, sent whole (several may come in one step);
results go back as ``functionResponse`` parts in the next user turn, by name and in
order. Gemini gives its calls no ids, so the calls get ids of our own. Thought
signatures, which Gemini wants back on the same parts, are this provider's opaque
state; thought summaries are never shown as the reply.

Gemini hears audio too: ``GeminiTranscriber`` gives it a voice clip (as the 16 kHz
WAV it was decoded to, a type every Gemini model takes) with an instruction to
transcribe it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from google import genai
from google.genai import errors, types

from shared.errors import (
    ContentFiltered,
    IncompleteResponse,
    ProviderError,
)
from shared.llm.base import (
    CUT_OFF,
    MALFORMED,
    NO_KEY,
    READ_TIMEOUT_SECONDS,
    ChatMessage,
    Finish,
    ImagePart,
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
from shared.llm.moderation import Category, Verdict, verdict_of
from shared.llm.transcribe import (
    TRANSCRIBE_INSTRUCTION,
    Clip,
    Transcribed,
    TranscriptionEvent,
    estimated_usage,
)
from shared.llm.wire import WireClient, WireError, WireStatusError, WireTransportError
from shared.schemas.documents import ModelFinishReason, Usage

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
API_VERSION = "v1beta"
"""The Gemini API's version the chat stream asks for (the SDK's default)."""

_FINISH_REASONS: dict[str, ModelFinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}
# The model tried to call a tool and could not: no usable reply came.
_FAILED_CALLS = ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL")


def _value(text: str) -> Any:
    """A tool's output as a JSON value (Gemini wants structured responses)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _args(arguments: str) -> dict[str, Any]:
    value = _value(arguments or "{}")
    return value if isinstance(value, dict) else {}


def _parts(message: ChatMessage) -> list[dict[str, Any]]:
    """The parts of one normalised message."""
    if message.role == "tool":
        key = "error" if message.is_error else "output"
        response = {"name": message.name, "response": {key: _value(message.text)}}
        return [{"functionResponse": response}]
    raw = message.state_for("google")
    signatures: dict[str, Any] = json.loads(raw) if raw else {}
    parts: list[dict[str, Any]] = []
    if message.text:
        part: dict[str, Any] = {"text": message.text}
        if signatures.get("text"):
            part["thoughtSignature"] = signatures["text"]
        parts.append(part)
    parts.extend(
        {"inlineData": {"mimeType": image.media_type, "data": image.data}}
        for image in message.images
    )
    calls = signatures.get("calls") or []
    for index, call in enumerate(message.tool_calls):
        part = {"functionCall": {"name": call.name, "args": _args(call.arguments)}}
        if index < len(calls) and calls[index]:
            part["thoughtSignature"] = calls[index]
        parts.append(part)
    return parts


def _wire_request(request: ModelRequest) -> dict[str, Any]:
    # Gemini's implicit cache matches a prompt's prefix as the model reads it: the system
    # instruction and tools (the same on every request of a conversation), then the
    # turns, which only grow at the end (``shared.agent.prompt.history``). Explicit context
    # caching (``cachedContents``) is not used: it bills storage by the hour, for prefixes
    # that the implicit cache already serves at the same discount.
    body: dict[str, Any] = {
        "contents": merged_turns(request.messages, _parts, assistant="model", key="parts")
    }
    if request.system:
        body["systemInstruction"] = {"parts": [{"text": request.system}]}
    if request.tools:
        declarations = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}
            for t in request.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    if request.max_tokens is not None:
        body["generationConfig"] = {"maxOutputTokens": request.max_tokens}
    return body


# What the SDK and its transport raise, and a chunk that is not JSON (``translate_error``
# makes them ours).
FAILURES = (
    errors.APIError,
    httpx2.HTTPError,
    errors.UnknownApiResponseError,
    json.JSONDecodeError,
)


def translate_error(exc: Exception) -> ProviderError:
    """Our exception for one of ``wire``'s (the chat stream), a ``google.genai`` or
    ``httpx2`` one (the SDK's transport: transcription), or for a chunk that could not
    be read."""
    if isinstance(exc, WireStatusError):
        return status_error(exc.status, str(exc))
    if isinstance(exc, WireTransportError):
        return transport_error(exc)
    if isinstance(exc, errors.APIError):
        return status_error(exc.code, f"{exc.code} {exc.status}: {exc.message}")
    if isinstance(exc, httpx2.TransportError):
        return transport_error(exc)
    if isinstance(exc, (errors.UnknownApiResponseError, json.JSONDecodeError)):
        return ProviderError(MALFORMED, detail=repr(exc))
    return unforeseen_error(exc)


class _StreamState:
    """What a ``streamGenerateContent`` stream has said so far (fed one SSE line at a
    time: a chunk is one ``data:`` line of JSON)."""

    def __init__(self) -> None:
        self.calls: list[ToolCallRequest] = []
        self.call_signatures: list[str | None] = []
        self.text_signature: str | None = None
        self.finish: str | None = None
        self.usage = Usage()

    def feed(self, line: str) -> list[TextDelta]:
        chunk = sse_json(line)
        if chunk is None:
            return []
        error = chunk.get("error")
        if error is not None:  # the API's error, sent in the middle of the stream
            error = error if isinstance(error, dict) else {"message": str(error)}
            code = error.get("code") if isinstance(error.get("code"), int) else 500
            raise status_error(code, f"{code} {error.get('status')}: {error.get('message')}")
        texts: list[TextDelta] = []
        candidates = chunk.get("candidates") or ()
        for candidate in candidates[:1]:
            for part in (candidate.get("content") or {}).get("parts") or ():
                signature = part.get("thoughtSignature")
                call = part.get("functionCall")
                if call is not None:
                    own = call.get("id") or f"gemini_call_{len(self.calls)}"
                    arguments = json.dumps(call.get("args") or {})
                    self.calls.append(ToolCallRequest(own, call.get("name", ""), arguments))
                    self.call_signatures.append(signature)
                elif part.get("thought"):
                    continue  # a summary of the model's thinking, not its reply
                else:
                    if signature:
                        self.text_signature = signature
                    if part.get("text"):
                        texts.append(TextDelta(part["text"]))
            reason = candidate.get("finishReason")
            if reason:
                self.finish = reason
        blocked = (chunk.get("promptFeedback") or {}).get("blockReason")
        if blocked and not candidates:
            self.finish = "SAFETY"
        usage = chunk.get("usageMetadata")
        if usage:
            self.usage = Usage(
                input_tokens=(usage.get("promptTokenCount") or 0)
                + (usage.get("toolUsePromptTokenCount") or 0),
                output_tokens=(usage.get("candidatesTokenCount") or 0)
                + (usage.get("thoughtsTokenCount") or 0),
                # Part of promptTokenCount: what the implicit cache served.
                cached_input_tokens=usage.get("cachedContentTokenCount") or 0,
            )
        return texts

    def reason(self) -> ModelFinishReason:
        assert self.finish is not None
        if self.finish in _FAILED_CALLS:
            raise ProviderError(
                "The model could not put its tool call together; please try again.",
                detail=self.finish,
            )
        if self.finish == "STOP" and self.calls:
            return "tool_calls"
        return _FINISH_REASONS.get(self.finish, "stop")

    def opaque(self) -> str:
        if not self.text_signature and not any(self.call_signatures):
            return ""
        return json.dumps({"text": self.text_signature, "calls": self.call_signatures})

    def ending(self) -> Iterator[ModelEvent]:
        if self.finish is None:
            raise IncompleteResponse(CUT_OFF)
        reason = self.reason()
        yield from self.calls
        yield Finish(reason, self.usage, bounded_state("google", self.opaque()))


class SdkClient:
    """A ``genai.Client`` whose calls go over the process's one client stack (its async
    client is ``transport.http_client``: ``wire``'s connections), and what closes it.
    genai makes a sync client and a websocket TLS context too, whatever it is given,
    and nothing here uses them: both are given the process's TLS context, which spares
    genai making contexts of its own (each loads the system's trust store again)."""

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None,
        retry_options: types.HttpRetryOptions | None = None,
    ) -> None:
        from shared.llm.transport import http_client, sync_client, timeout, tls_context

        self.http = http_client(timeout())
        self._sync = sync_client()
        options = types.HttpOptions(
            base_url=base_url,
            timeout=round(READ_TIMEOUT_SECONDS * 1000),  # in ms
            retry_options=retry_options,
            httpx_async_client=self.http,
            httpx_client=self._sync,
            async_client_args={"ssl": tls_context()},  # genai's websocket context
        )
        self.sdk = genai.Client(api_key=api_key or NO_KEY, http_options=options)

    async def aclose(self) -> None:
        await self.sdk.aio.aclose()  # a client it was given, genai leaves open
        await self.http.aclose()
        self._sync.close()


def _client(api_key: str | None, base_url: str | None, max_retries: int) -> SdkClient:
    # Retries as the OpenAI SDK makes them: up to ``max_retries`` more attempts,
    # from 0.5 s doubling to 8 s, on 408, 429 and 5xx or a failed connection.
    retries = types.HttpRetryOptions(
        attempts=max_retries + 1, initial_delay=0.5, max_delay=8.0, jitter=0.25
    )
    return SdkClient(api_key, base_url, retries)


class GeminiProvider:
    """Streams the Gemini API's ``streamGenerateContent``, with whole function calls."""

    provider: ProviderName = "google"

    def __init__(self, client: WireClient, model: str) -> None:
        self._client = client
        self._model = model

    @classmethod
    def connect(
        cls, model: str, api_key: str | None, base_url: str | None, max_retries: int = 2
    ) -> GeminiProvider:
        headers = {"x-goog-api-key": api_key or NO_KEY}
        return cls(WireClient(base_url or DEFAULT_BASE_URL, headers, max_retries), model)

    @property
    def label(self) -> str:
        return self._model

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        # Not through the SDK, as OpenAI's (``wire``): its public streaming call
        # builds a typed GenerateContentResponse per chunk, and even one layer down (its
        # client's own streamed request, not public API) each chunk passed through httpx2
        # and the SDK's response objects: several times our CPU a token
        # (bench/provider_overhead.py).
        @asynccontextmanager
        async def opened() -> AsyncIterator[AsyncIterator[str]]:
            path = f"/{API_VERSION}/models/{self._model}:streamGenerateContent?alt=sse"
            async with self._client.stream(path, _wire_request(request)) as chunks:
                yield sse_lines(chunks)

        return relay(opened, _StreamState(), (WireError,), translate_error)

    async def aclose(self) -> None:
        await self._client.aclose()


class GeminiTranscriber:
    """A Gemini model told to transcribe a clip, streamed (``streamGenerateContent``).
    Transcription is no hot path, so the SDK's typed chunks are read here."""

    def __init__(self, client: SdkClient, model: str) -> None:
        self._client = client
        self._model = model

    @classmethod
    def connect(
        cls, model: str, api_key: str | None, base_url: str | None, max_retries: int = 2
    ) -> GeminiTranscriber:
        return cls(_client(api_key, base_url, max_retries), model)

    @property
    def label(self) -> str:
        return self._model

    async def transcribe(self, clip: Clip) -> AsyncGenerator[TranscriptionEvent, None]:
        audio = types.Part.from_bytes(data=clip.wav, mime_type="audio/wav")
        contents = [
            types.Content(role="user", parts=[audio, types.Part(text=TRANSCRIBE_INSTRUCTION)])
        ]
        texts: list[str] = []
        usage: Usage | None = None
        finish: str | None = None
        try:
            stream = await self._client.sdk.aio.models.generate_content_stream(
                model=self._model, contents=contents
            )
            async for chunk in stream:
                for candidate in (chunk.candidates or [])[:1]:
                    for part in (candidate.content.parts if candidate.content else None) or ():
                        if part.text and not part.thought:
                            texts.append(part.text)
                            yield TextDelta(part.text)
                    if candidate.finish_reason is not None:
                        finish = str(candidate.finish_reason.value)
                if chunk.usage_metadata is not None:
                    meta = chunk.usage_metadata
                    usage = Usage(
                        input_tokens=meta.prompt_token_count or 0,
                        output_tokens=(meta.candidates_token_count or 0)
                        + (meta.thoughts_token_count or 0),
                    )
        except FAILURES as exc:
            raise translate_error(exc) from exc
        if finish is None:
            raise IncompleteResponse("The transcription was cut off before it finished.")
        if _FINISH_REASONS.get(finish) == "content_filter":
            raise ContentFiltered(
                "Spark AI Agent stopped the transcription because the content filter flagged it."
            )
        yield Transcribed("".join(texts).strip(), usage or estimated_usage(clip.duration_seconds))

    async def aclose(self) -> None:
        await self._client.aclose()


_HARMS: dict[str, Category] = {
    "HARM_CATEGORY_HARASSMENT": "harassment",
    "HARM_CATEGORY_HATE_SPEECH": "hate",
    "HARM_CATEGORY_SEXUALLY_EXPLICIT": "sexual",
    # Gemini rates self-harm, weapons and drugs together as dangerous: a parent is told
    # "violence", and the reply given is the kind one, not the helpline's.
    "HARM_CATEGORY_DANGEROUS_CONTENT": "violence",
}
_FLAGGED_PROBABILITIES = frozenset({"MEDIUM", "HIGH"})


class GeminiModerator:
    """Gemini's safety ratings of a turn, where Gemini is the model: the text and
    images are sent to ``generateContent`` for a one-token answer, and the ratings
    Gemini gives the prompt (``promptFeedback``) and its answer are read; a rating of
    medium or high probability, or a prompt Gemini blocked, is flagged."""

    def __init__(self, client: SdkClient, model: str) -> None:
        self._client = client
        self._model = model

    @classmethod
    def connect(
        cls, model: str, api_key: str | None, base_url: str | None, max_retries: int = 2
    ) -> GeminiModerator:
        return cls(_client(api_key, base_url, max_retries), model)

    @property
    def label(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return "google"

    async def judge(self, text: str, images: Sequence[ImagePart] = ()) -> Verdict:
        parts = [types.Part(text=text)] if text else []
        parts += [
            types.Part.from_bytes(data=base64.b64decode(i.data), mime_type=i.media_type)
            for i in images
        ]
        if not parts:
            return verdict_of(())
        settings = [
            types.SafetySetting(
                category=types.HarmCategory(name), threshold=types.HarmBlockThreshold.OFF
            )
            for name in _HARMS
        ]
        config = types.GenerateContentConfig(max_output_tokens=1, safety_settings=settings)
        try:
            answer = await self._client.sdk.aio.models.generate_content(
                model=self._model, contents=[types.Content(role="user", parts=parts)], config=config
            )
        except FAILURES as exc:
            raise translate_error(exc) from exc
        ratings = list((answer.prompt_feedback and answer.prompt_feedback.safety_ratings) or [])
        for candidate in answer.candidates or ():
            ratings += candidate.safety_ratings or []
        found = [
            _HARMS[str(r.category.value)]
            for r in ratings
            if r.category is not None
            and str(r.category.value) in _HARMS
            and r.probability is not None
            and str(r.probability.value) in _FLAGGED_PROBABILITIES
        ]
        if answer.prompt_feedback and answer.prompt_feedback.block_reason and not found:
            found.append("violence")  # blocked for a reason it did not rate
        return verdict_of(found)
