"""The offline model: deterministic, clearly labelled, for running without a key."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator

from shared.clock import Clock
from shared.llm.base import Finish, ModelEvent, ModelRequest, ProviderName, TextDelta, Usage

LABEL = "offline model"

_GREETING = re.compile(r"^\s*(hi|hello|hey|test|good (morning|afternoon|evening))\b", re.I)


def compose_reply(user_text: str, images: int = 0) -> str:
    """The offline model's whole reply to ``user_text`` (sent with ``images`` images):
    always the same for the same input."""
    prefix = "[Offline model] "
    if _GREETING.match(user_text):
        return (
            prefix + "Hello! I'm Spark AI Agent, running with the offline model because no "
            "language model is configured. Set SPARK_MODEL and its provider's API key to talk "
            "to a real model."
        )
    quoted = " ".join(user_text.split())
    if len(quoted) > 200:
        quoted = quoted[:199] + "…"
    seen = ""
    if images:
        seen = f" I received {images} image{'s' if images > 1 else ''} but can't look at them."
    return (
        prefix + f"You said: “{quoted}”.{seen} I'm the offline model, so I can't think about "
        "it, but your message has been saved and the streaming path works end to end."
    )


class OfflineProvider:
    """Streams ``compose_reply`` word by word, ``token_delay`` seconds apart."""

    label = LABEL
    provider: ProviderName = "offline"

    def __init__(self, clock: Clock, token_delay: float = 0.015) -> None:
        self._clock = clock
        self._token_delay = token_delay

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        last = next((m for m in reversed(request.messages) if m.role == "user"), None)
        last_user = last.text if last is not None else ""
        reply = compose_reply(last_user, len(last.images) if last is not None else 0)
        words = re.findall(r"\S+\s*", reply)
        for word in words:
            if self._token_delay:
                await self._clock.sleep(self._token_delay)
            yield TextDelta(word)
        yield Finish("stop", Usage(len(last_user.split()), len(words)))
