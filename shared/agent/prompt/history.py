"""What the model sees of a conversation: its latest messages, normalised.

Tool calls and their results are kept in pairs: an assistant turn that calls tools
is always followed by one tool turn per call, wherever the result was stored (inline
results sit in the same message, task results arrive later as ``tool`` messages).
A call still waiting for its result gets a note saying so, and a result whose call
fell out of the window is left out with it.

A user turn names each of its attachments; the images and PDF text that
``shared.agent.prompt.files`` loaded within its budget (``shown``) ride on it, the others stay
as references.

Opaque provider state (``Message.provider_state``, one entry per model step) rides on
the assistant turn of its step, and only to the provider that wrote it: a
conversation that moves to another provider is sent our normalised turns alone.

The window moves in steps (``window_start``): its first message stays where it is
while the conversation grows, and moves ``step`` messages on at once, so each model
request is the one before with turns added at its end, a prefix the provider's prompt
cache holds (docs/concepts/prompt-cache.md). Where it starts is counted over the whole
conversation (the archived messages too), never over the live document alone, so a
roll-over does not move it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from shared.agent.prompt.files import Shown, attachments, describe
from shared.llm.base import ChatMessage, ImagePart, ProviderName, ProviderState, ToolCallRequest
from shared.schemas.documents import Message, ToolResult

PENDING_OUTPUT = json.dumps(
    {"status": "pending", "note": "This tool is still running; its result will follow."}
)


def _results(messages: Sequence[Message]) -> dict[str, ToolResult]:
    return {
        part.tool_result.tool_call_id: part.tool_result
        for message in messages
        for part in message.content
        if part.tool_result is not None
    }


def _for_model(output_json: str) -> str:
    """A tool's output as the model reads it: text as itself (a lesson's lines, with
    their quotes unescaped, so an edit can quote them exactly), anything else as JSON."""
    if output_json.startswith('"'):
        try:
            text = json.loads(output_json)
        except json.JSONDecodeError:
            return output_json
        if isinstance(text, str):
            return text
    return output_json


def _states(message: Message, provider: ProviderName | None) -> dict[int, ProviderState]:
    """``message``'s opaque states by step, those ``provider`` wrote only."""
    states: dict[int, ProviderState] = {}
    for state in message.provider_state or ():
        if provider is not None and state.provider == provider:
            states[state.step] = ProviderState(provider, state.data)
    return states


def _assistant_turns(
    message: Message,
    results: dict[str, ToolResult],
    names: dict[str, str],
    provider: ProviderName | None = None,
) -> list[ChatMessage]:
    turns: list[ChatMessage] = []
    text: list[str] = []
    calls: list[ToolCallRequest] = []
    states = _states(message, provider)
    step = 0  # each assistant turn here is one model step

    def flush() -> None:
        nonlocal step
        if not text and not calls:
            return
        turns.append(
            ChatMessage("assistant", "".join(text), tool_calls=tuple(calls), state=states.get(step))
        )
        step += 1
        for call in calls:
            result = results.get(call.id)
            turns.append(
                ChatMessage(
                    "tool",
                    _for_model(result.output_json) if result else PENDING_OUTPUT,
                    tool_call_id=call.id,
                    name=call.name,
                    is_error=result is not None and result.status == "error",
                )
            )
        text.clear()
        calls.clear()

    for part in message.content:
        if part.type == "text" and part.text:
            if calls:
                flush()
            text.append(part.text)
        elif part.tool_call is not None:
            call = part.tool_call
            names[call.id] = call.name
            calls.append(ToolCallRequest(call.id, call.name, call.args_json))
        elif part.tool_result is not None and calls:
            flush()
    flush()
    return turns


def _user_turn(message: Message, shown: Mapping[str, Shown]) -> ChatMessage | None:
    texts = [message.text] if message.text else []
    images: list[ImagePart] = []
    for ref in attachments(message):
        note, image = describe(ref, shown)
        texts.append(note)
        if image is not None:
            images.append(image)
    if not texts:
        return None
    return ChatMessage("user", "\n\n".join(texts), images=tuple(images))


def to_chat(
    messages: Sequence[Message],
    provider: ProviderName | None = None,
    shown: Mapping[str, Shown] | None = None,
) -> list[ChatMessage]:
    """The model's view of ``messages``, in order (streaming messages left out), with
    the opaque state ``provider`` wrote (none when ``provider`` is ``None``) and the
    attachments loaded in ``shown`` (the others as references)."""
    results = _results(messages)
    names: dict[str, str] = {}
    chat: list[ChatMessage] = []
    answering = 0  # where the turns answering the latest user turn begin
    for message in messages:
        if message.regenerates is not None:
            # A reply made again stands for the one it replaces and whatever followed
            # that user turn (its tool turns, its follow-ups): the model never sees them.
            del chat[answering:]
        if message.role == "user":
            turn = _user_turn(message, shown or {})
            if turn is not None:
                chat.append(turn)
                answering = len(chat)
        elif message.role == "assistant" and message.status != "streaming":
            chat.extend(_assistant_turns(message, results, names, provider))
    return chat


def window_start(total: int, limit: int, step: int = 1) -> int:
    """Where the window of a conversation of ``total`` messages starts (counted from its
    first message ever): at a multiple of ``step``, as late as leaves at least ``limit``
    messages in it. It holds from ``limit`` to ``limit + step - 1`` messages, and stays
    put until the conversation has grown by ``step``."""
    return max(total - limit, 0) // max(step, 1) * max(step, 1)


def window(
    messages: Sequence[Message], limit: int, offset: int = 0, step: int = 1
) -> Sequence[Message]:
    """The messages of the window, of ``messages`` (a conversation's newest, ``offset``
    messages before them archived)."""
    start = window_start(offset + len(messages), limit, step)
    return messages[max(start - offset, 0) :]


def build_history(
    messages: Sequence[Message],
    limit: int,
    max_chars: int | None = None,
    provider: ProviderName | None = None,
    shown: Mapping[str, Shown] | None = None,
    *,
    offset: int = 0,
    step: int = 1,
) -> list[ChatMessage]:
    """The model's view of the window over ``messages`` (``window``: at least the last
    ``limit``, moving ``step`` at once; ``offset``: how many came before ``messages``),
    oldest first, cut to ``max_chars`` of text: first by whole steps of messages (so the
    cut, too, stays put from one request to the next), then, if the latest messages
    alone are over, turn by turn, oldest first. A dropped call takes its results with
    it, and the history never starts with a result whose call is gone. Opaque state
    goes only to the ``provider`` that wrote it; attachments show what ``shown`` holds."""
    total = offset + len(messages)
    start = window_start(total, limit, step)
    chat = to_chat(messages[max(start - offset, 0) :], provider, shown)
    if max_chars is None:
        return chat
    if step > 1:
        # The latest user message's place in the conversation: the cut never passes it.
        last_user = offset + max(
            (i for i, m in enumerate(messages) if m.role == "user"), default=len(messages)
        )
        while sum(_chars(turn) for turn in chat) > max_chars and start + step <= last_user:
            start += step
            chat = to_chat(messages[max(start - offset, 0) :], provider, shown)
    users = [i for i, turn in enumerate(chat) if turn.role == "user"]
    last_user = users[-1] if users else 0
    size = sum(_chars(turn) for turn in chat)
    start = 0
    # Cut oldest first, never the turn the model answers now (the latest user message).
    while size > max_chars and start < last_user:
        size -= _chars(chat[start])
        start += 1
    while start < len(chat) and chat[start].role == "tool":
        start += 1  # a result never opens the history without its call
    return chat[start:]


def _chars(turn: ChatMessage) -> int:
    return len(turn.text) + sum(len(c.arguments) for c in turn.tool_calls)


def steps_since_user(messages: Sequence[Message]) -> int:
    """Model steps already taken since the user last spoke (task follow-ups continue
    the same turn, so they share its step budget)."""
    steps = 0
    for message in reversed(messages):
        if message.role == "user":
            break
        if message.role == "assistant":
            steps += sum(1 for t in to_chat([message]) if t.role == "assistant") or 1
            if message.regenerates is not None:
                break  # what it replaced does not count
    return steps


def open_document_note(document_id: str | None) -> str:
    """What the system prompt says of the lesson the conversation works on: only its id
    (the model reads the lesson with the document tools when it needs to); nothing when
    there is none (the tools say so if called)."""
    if document_id is None:
        return ""
    return (
        f"\n\nA lesson is open in this conversation (id {document_id}). The document "
        "tools read and edit it; read it before changing it."
    )
