"""The offline model: what serves when no provider is configured. It is the demo model
(``shared/llm/demo.py``): deterministic words, clearly labelled, and calls of the real
tools for the few requests it recognises, so the product shows itself without a key."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncGenerator

from shared.clock import Clock
from shared.llm.base import (
    Finish,
    ModelEvent,
    ModelRequest,
    ProviderName,
    TextDelta,
    ToolCallRequest,
)
from shared.llm.demo import respond
from shared.schemas.documents import Usage

LABEL = "offline model"


class OfflineProvider:
    """Streams the demo model's reply (``demo.respond``) word by word, ``token_delay``
    seconds apart, or its tool calls, each with an id of its own (a lesson's id derives
    from its call's: two calls in one conversation must not share one)."""

    label = LABEL
    provider: ProviderName = "offline"

    def __init__(self, clock: Clock, token_delay: float = 0.015) -> None:
        self._clock = clock
        self._token_delay = token_delay

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        turn = respond(request)
        words = re.findall(r"\S+\s*", turn.text)
        for word in words:
            if self._token_delay:
                await self._clock.sleep(self._token_delay)
            yield TextDelta(word)
        for call in turn.calls:
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            yield ToolCallRequest(f"demo_{secrets.token_hex(6)}", call.name, arguments)
        read = sum(len(m.text.split()) for m in request.messages[-1:])
        usage = Usage(input_tokens=read, output_tokens=len(words) + len(turn.calls))
        yield Finish("tool_calls" if turn.calls else "stop", usage)
