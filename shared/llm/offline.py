"""The offline model: deterministic, clearly labelled, for running without a key."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator

from shared.clock import Clock
from shared.llm.base import Finish, ModelEvent, ModelRequest, TextDelta, Usage

LABEL = "offline model"

_GREETING = re.compile(r"^\s*(hi|hello|hey|test|good (morning|afternoon|evening))\b", re.I)


def compose_reply(user_text: str) -> str:
    """The offline model's whole reply to ``user_text``: always the same for the same text."""
    prefix = "[Offline model] "
    if _GREETING.match(user_text):
        return (
            prefix + "Hello! I'm Spark AI Agent, running with the offline model because no "
            "language model is configured. Set OPENAI_API_KEY to talk to a real model."
        )
    quoted = " ".join(user_text.split())
    if len(quoted) > 200:
        quoted = quoted[:199] + "…"
    return (
        prefix + f"You said: “{quoted}”. I'm the offline model, so I can't think about it, "
        "but your message has been saved and the streaming path works end to end."
    )


class OfflineProvider:
    """Streams ``compose_reply`` word by word, ``token_delay`` seconds apart."""

    label = LABEL

    def __init__(self, clock: Clock, token_delay: float = 0.015) -> None:
        self._clock = clock
        self._token_delay = token_delay

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        last_user = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
        reply = compose_reply(last_user)
        words = re.findall(r"\S+\s*", reply)
        for word in words:
            if self._token_delay:
                await self._clock.sleep(self._token_delay)
            yield TextDelta(word)
        yield Finish("stop", Usage(len(last_user.split()), len(words)))
