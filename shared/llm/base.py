"""The provider-neutral model interface (DESIGN §5).

A request is a system prompt, normalised chat messages and tool definitions; the
reply is a stream of ``TextDelta`` and complete ``ToolCallRequest`` events that
always ends with one ``Finish``. The shapes fit OpenAI Chat Completions, Anthropic
Messages (``tool_use`` / ``tool_result`` blocks) and Gemini (``functionCall`` /
``functionResponse``, which is why a tool message also carries the tool's name).
Provider wire types never leave their adapter.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shared.errors import ContentFiltered, IncompleteResponse


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


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One normalised turn of the conversation given to the model.

    ``user`` and ``assistant`` turns carry ``text``; an assistant turn may also carry
    ``tool_calls``; a ``tool`` turn answers one call (``tool_call_id`` and ``name``).
    """

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class ModelRequest:
    system: str
    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec] = ()


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


FinishReason = Literal["stop", "tool_calls", "length", "content_filter"]


@dataclass(frozen=True, slots=True)
class Finish:
    """The model finished its turn; nothing follows this event."""

    reason: FinishReason
    usage: Usage = field(default_factory=Usage)
    type: Literal["finish"] = "finish"


ModelEvent = TextDelta | ToolCallRequest | Finish


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


async def complete_text(provider: ModelProvider, request: ModelRequest, what: str) -> str:
    """The whole text of a reply that no one watches stream (tools drafting content)."""
    parts: list[str] = []
    finish: Finish | None = None
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            parts.append(event.text)
        elif isinstance(event, Finish):
            finish = event
    finished(finish, what)
    return "".join(parts)


class ModelProvider(Protocol):
    """A language model that streams a reply."""

    @property
    def label(self) -> str:
        """What to record as the message's ``model``, e.g. ``gpt-4o-mini``."""
        ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream the model's reply to ``request``.

        The stream ends with exactly one ``Finish``; tool calls come complete.

        Raises:
            ProviderError: the provider failed, including a stream that ended
                without a finish reason (``IncompleteResponse``).
        """
        ...
