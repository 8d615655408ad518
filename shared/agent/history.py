"""What the model sees of a conversation: its latest messages, normalised."""

from __future__ import annotations

from collections.abc import Sequence

from shared.llm.base import ChatMessage
from shared.schemas.documents import Message


def to_chat(message: Message) -> ChatMessage | None:
    """The model's view of one stored message (``None``: nothing to show)."""
    text = message.text
    if message.role == "user" and text:
        return ChatMessage("user", text)
    if message.role == "assistant" and text and message.status != "streaming":
        return ChatMessage("assistant", text)
    return None


def build_history(messages: Sequence[Message], limit: int) -> list[ChatMessage]:
    """The last ``limit`` messages that mean something to the model, oldest first."""
    chat = [c for c in map(to_chat, messages) if c is not None]
    return chat[-limit:]
