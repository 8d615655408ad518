"""The provider-neutral model interface (DESIGN §5).

A request is a system prompt, normalised chat messages and tool definitions; the
reply is a stream of ``TextDelta`` and complete ``ToolCallRequest`` events that
always ends with one ``Finish``. The shapes fit OpenAI Chat Completions, Anthropic
Messages (``tool_use`` / ``tool_result`` blocks) and Gemini (``functionCall`` /
``functionResponse``, which is why a tool message also carries the tool's name).
Provider wire types never leave their adapter.

What a provider needs back that we do not model (Anthropic's thinking blocks and
their signatures, Gemini's thought signatures) travels as a ``ProviderState``: the
adapter puts it on ``Finish``, the run stores it with the message, and history hands
it back on the same turn. It is opaque everywhere else, and an adapter uses only the
states its own provider wrote (a conversation may move between providers).
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterator,
    Sequence,
)
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from shared.errors import (
    ContentFiltered,
    IncompleteResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
)
from shared.schemas.documents import ModelFinishReason, Usage

log = logging.getLogger(__name__)

MALFORMED = "The model provider sent a malformed stream."
CUT_OFF = "The model's reply was cut off before it finished."

# What every adapter asks of its HTTP client: a reply may take two minutes to finish,
# a connection ten seconds to open; a local fake may need no key (the SDKs insist on one,
# and Anthropic's would otherwise hunt for credentials of its own).
READ_TIMEOUT_SECONDS = 120.0
CONNECT_TIMEOUT_SECONDS = 10.0
NO_KEY = "no-key"


def status_error(status: object, detail: str) -> ProviderError:
    """Our exception for a provider's HTTP error status, the same for every adapter:
    429 is rate limited, 5xx (Anthropic's 529 "overloaded" too) unavailable, any other
    status rejected. ``detail`` (what the provider said) goes to the log only."""
    if status == 429:
        return ProviderRateLimited(
            "The model provider is busy right now; please try again shortly.", detail=detail
        )
    if isinstance(status, int) and status >= 500:
        return ProviderUnavailable(
            "The model provider is having trouble; please try again.", detail=detail
        )
    return ProviderRejected(
        "The model provider refused this request; please try again later.", detail=detail
    )


def transport_error(exc: Exception) -> ProviderError:
    """Our exception for a connection that failed or dropped the reply."""
    return ProviderUnavailable(
        "The model provider could not be reached or dropped the reply.", detail=repr(exc)
    )


def unforeseen_error(exc: Exception) -> ProviderError:
    """Our exception for an SDK failure no adapter foresaw."""
    return ProviderError("The model provider failed; please try again.", detail=repr(exc))


def sse_json(line: str) -> dict[str, Any] | None:
    """The JSON object of one SSE ``data:`` line; ``None`` for any other line (blank
    separators, comments, ``event:`` lines) and for OpenAI's closing ``[DONE]``.

    Raises:
        ProviderError: the data is not a JSON object.
    """
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise ProviderError(MALFORMED) from None
    if not isinstance(event, dict):
        raise ProviderError(MALFORMED)
    return event


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it; ``parameters`` is a JSON Schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """The model asks for ``name`` to run with ``arguments`` (JSON text, unvalidated)."""

    id: str
    name: str
    arguments: str
    type: Literal["tool_call"] = "tool_call"


ProviderName = Literal["openai", "anthropic", "google", "offline", "scripted"]
"""Which provider an adapter speaks to (the part of ``SPARK_MODEL`` before the colon)."""

MAX_STATE_CHARS = 16_384
"""The most opaque state one model step may keep; more is dropped (and logged), so a
provider cannot fill the conversation document with it (``StepState`` says the same)."""


@dataclass(frozen=True, slots=True)
class ProviderState:
    """What ``provider`` needs back with this turn, as it wrote it (opaque JSON text)."""

    provider: ProviderName
    data: str


def bounded_state(provider: ProviderName, data: str) -> ProviderState | None:
    """``data`` as ``provider``'s state, or ``None`` when there is none or it is too big."""
    if not data:
        return None
    if len(data) > MAX_STATE_CHARS:
        log.warning("dropped %d characters of %s state (over the limit)", len(data), provider)
        return None
    return ProviderState(provider, data)


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image given to the model: its ``media_type`` (``image/jpeg``, ``image/png``…)
    and its bytes, base64-encoded (standard alphabet, no data-URL prefix)."""

    media_type: str
    data: str

    @classmethod
    def of(cls, media_type: str, data: bytes) -> ImagePart:
        """The image whose bytes are ``data``."""
        return cls(media_type, base64.b64encode(data).decode("ascii"))


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One normalised turn of the conversation given to the model.

    ``user`` and ``assistant`` turns carry ``text``; a user turn may also carry
    ``images`` (after its text); an assistant turn may also carry ``tool_calls`` and
    the ``state`` its provider asked to keep; a ``tool`` turn answers one call
    (``tool_call_id`` and ``name``).
    """

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    images: tuple[ImagePart, ...] = ()
    state: ProviderState | None = None

    def state_for(self, provider: ProviderName) -> str | None:
        """The opaque state ``provider`` wrote for this turn; another's is ignored."""
        if self.state is not None and self.state.provider == provider:
            return self.state.data
        return None


def merged_turns(
    messages: Sequence[ChatMessage],
    content: Callable[[ChatMessage], list[dict[str, Any]]],
    *,
    assistant: str,
    key: str,
) -> list[dict[str, Any]]:
    """Turns as Anthropic's Messages API and Gemini want them: ``tool`` turns become user
    turns and turns of the same role in a row are merged (so a step's results share one
    user turn, ahead of any text); a turn with no ``content`` is left out.

    ``assistant`` is the wire's name for the model's role, ``key`` for a turn's content.
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = assistant if message.role == "assistant" else "user"
        parts = content(message)
        if not parts:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1][key].extend(parts)
        else:
            turns.append({"role": role, key: parts})
    return turns


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What one model call is given. ``max_tokens``: the most its reply may take (the
    provider stops it there), and so what the egress reserves for it; ``None``: the
    provider's own limit (Anthropic's adapter sends its default).

    ``cache_key`` names the requests that share a prefix (one conversation's, or one
    user's task calls), for a provider whose prompt cache is steered by one (OpenAI's
    ``prompt_cache_key``); an opaque hash, never a name or an id as we keep it."""

    system: str
    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec] = ()
    max_tokens: int | None = None
    cache_key: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class Finish:
    """The model finished its turn; nothing follows this event.

    ``state`` is what the provider needs back with this turn next time, if anything.
    """

    reason: ModelFinishReason
    usage: Usage = field(default_factory=Usage)
    state: ProviderState | None = None
    type: Literal["finish"] = "finish"


ModelEvent = TextDelta | ToolCallRequest | Finish

W = TypeVar("W", contravariant=True)


class WireState(Protocol[W]):
    """What an adapter has read so far of one streamed reply, fed one item of its wire
    format at a time (an SSE line, a chunk)."""

    def feed(self, item: W) -> Sequence[TextDelta]:
        """The text this item adds (the hot path: one call per token).

        Raises:
            ProviderError: the item is malformed, or says the provider failed.
        """
        ...

    def ending(self) -> Iterator[ModelEvent]:
        """Once the stream is over: the tool calls, whole, then the one ``Finish``.

        Raises:
            IncompleteResponse: the stream ended before the reply finished.
        """
        ...


async def sse_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """The lines of an SSE body (``\n`` or ``\r\n`` ended), each decoded once whole.

    The SDKs' ``iter_lines`` reach the bytes through three more generators (text, then
    lines, then the SDK's own), each resumed for every token: a visible share of the
    api's CPU on streamed replies (bench/stream_overhead.py --py-spy), spared here.
    A line never splits a UTF-8 character: its ``\n`` is one byte of its own.
    """
    tail = b""
    async for chunk in chunks:
        if tail:
            chunk, tail = tail + chunk, b""
        *lines, tail = chunk.split(b"\n")
        for line in lines:
            yield (line[:-1] if line.endswith(b"\r") else line).decode()
    if tail:
        yield tail.rstrip(b"\r").decode()


async def relay(
    opened: Callable[[], AbstractAsyncContextManager[AsyncIterable[Any]]],
    state: WireState[Any],
    failures: tuple[type[Exception], ...],
    translate: Callable[[Exception], ProviderError],
) -> AsyncGenerator[ModelEvent, None]:
    """The events of one streamed reply: each item ``opened()`` gives is fed to ``state``
    and its text passed on, then ``state``'s ending. An SDK exception (``failures``)
    becomes ours through ``translate``.

    Every adapter's ``stream`` returns this generator itself, so a token passes through
    one generator and one ``feed`` call, as when each adapter wrote its own loop.
    """
    try:
        async with opened() as items:
            async for item in items:
                for delta in state.feed(item):
                    yield delta
    except failures as exc:
        raise translate(exc) from exc
    for event in state.ending():
        yield event


def finished(finish: Finish | None, what: str = "The model's reply") -> Finish:
    """``finish`` if the stream ended properly with something usable.

    Raises:
        IncompleteResponse: the stream ended without a finish reason.
        ContentFiltered: the provider's content filter stopped it.
    """
    if finish is None:
        raise IncompleteResponse(f"{what} was cut off before it finished.")
    if finish.reason == "content_filter":
        subject = what[0].lower() + what[1:]
        raise ContentFiltered(
            f"Spark AI Agent stopped {subject} because the content filter flagged it."
        )
    return finish


class Meter(Protocol):
    """The user's daily tokens, as one provider call outside a run sees them (DESIGN
    §13): an estimate is set aside before the call and what it used is counted after."""

    async def reserve(self, tokens: int, kind: str) -> str:
        """Set ``tokens`` aside for a ``kind`` of call about to be made; its id.

        Raises:
            RateLimited: today's tokens are spent (the call must not start).
            TaskCancelled: (a task's meter) its user cancelled the task.
        """
        ...

    async def settle(self, reservation: str, tokens: int) -> None:
        """Count the ``tokens`` the call used in place of its reservation (never
        raises: a reservation not settled is charged whole when its lease ends)."""
        ...


_FENCE = re.compile(r"^```[a-z]*\s*|\s*```$")


def unfenced(reply: str) -> str:
    """A model's reply without the code fence it may have put around it."""
    return _FENCE.sub("", reply.strip())


def json_in(reply: str) -> Any:
    """The JSON object in a model's reply (a fence or words around it are ignored).

    Raises:
        ValueError: there is no JSON object in it.
    """
    text = unfenced(reply)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("there is no JSON object in it")
    return json.loads(text[start : end + 1])


class ModelProvider(Protocol):
    """A language model that streams a reply."""

    @property
    def label(self) -> str:
        """What to record as the message's ``model``, e.g. ``gpt-4o-mini``."""
        ...

    @property
    def provider(self) -> ProviderName:
        """Whose opaque state this adapter writes and reads back."""
        ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream the model's reply to ``request``.

        The stream ends with exactly one ``Finish``; tool calls come complete.

        Raises:
            ProviderError: the provider failed, including a stream that ended
                without a finish reason (``IncompleteResponse``).
        """
        ...
