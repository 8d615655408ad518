"""The offline model: deterministic, clearly labelled, for running without a key."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator

from shared.clock import Clock
from shared.llm.base import Finish, ModelEvent, ModelRequest, ProviderName, TextDelta
from shared.schemas.documents import Usage

LABEL = "offline model"

_GREETING = re.compile(r"^\s*(hi|hello|hey|test|good (morning|afternoon|evening))\b", re.I)


_FIELD = re.compile(r"^(Topic|Learners|Duration|This lesson): (.+)$", re.M)
_PLAN = re.compile(r"^Plan a sequence of (\d+) lessons")


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _sample_lesson(brief: str) -> str:
    """A small valid lesson on the brief's topic, so ``create_lesson`` and
    ``plan_lessons`` work end to end offline (clearly marked as a sample)."""
    fields = dict(_FIELD.findall(brief))
    topic = _xml_text(fields.get("This lesson") or fields.get("Topic", "the topic"))
    learners = _xml_text(fields.get("Learners", "the class"))
    return f"""<lesson>
<h1>{topic[:120]}</h1>
<note>Written by the offline model: a sample lesson, not a real draft.</note>
<h2>Objectives</h2>
<ul>
<li>Describe the key ideas of {topic[:120]}.</li>
</ul>
<h2>Timings</h2>
<ol>
<li>10 min – introduction for {learners}</li>
<li>20 min – practice</li>
</ol>
<h2>Practice</h2>
<exercise id="ex-1" type="true-false">
<h3>True or false?</h3>
<statement id="s-1" answer="true" student-answer="">This is a sample statement.</statement>
</exercise>
</lesson>"""


def compose_reply(user_text: str, images: int = 0) -> str:
    """The offline model's whole reply to ``user_text`` (sent with ``images`` images):
    always the same for the same input."""
    if user_text.startswith("Write the lesson."):
        return _sample_lesson(user_text)
    plan = _PLAN.match(user_text)
    if plan:
        count = int(plan.group(1))
        entries = [{"title": f"Lesson {i + 1}", "focus": "A sample focus"} for i in range(count)]
        return json.dumps({"lessons": entries})
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
        usage = Usage(input_tokens=len(last_user.split()), output_tokens=len(words))
        yield Finish("stop", usage)
