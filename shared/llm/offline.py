"""The offline model: deterministic, clearly labelled, for running without a key."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator

from shared.clock import Clock
from shared.llm.base import Finish, ModelEvent, ModelRequest, ProviderName, TextDelta
from shared.prose import listed
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


# The notes a user turn carries after its text, one per attachment
# (``shared/agent/files.py``, ``describe``): what the model reads, never the user.
_NOTE = re.compile(r'(?:^|\n\n)\[(Image|PDF|Attachment)(?: attached)?(?: earlier)?:? "([^"\n]*)"')
_KINDS = {"Image": "an image", "PDF": "a PDF", "Attachment": "a file"}


def _attached(notes: list[tuple[str, str]]) -> str:
    """ "You attached an image: My homework.png." for the notes' files."""
    names = [name for _, name in notes]
    kinds = {kind for kind, _ in notes}
    if len(names) == 1:
        what = _KINDS[notes[0][0]]
    elif kinds == {"Image"}:
        what = f"{len(names)} images"
    else:
        what = f"{len(names)} files"
    return f" You attached {what}: {listed(names)}."


def compose_reply(user_text: str) -> str:
    """The offline model's whole reply to ``user_text`` (a user turn: the user's words,
    then a note for each attachment): always the same for the same input."""
    if user_text.startswith("Write the lesson."):
        return _sample_lesson(user_text)
    plan = _PLAN.match(user_text)
    if plan:
        count = int(plan.group(1))
        entries = [{"title": f"Lesson {i + 1}", "focus": "A sample focus"} for i in range(count)]
        return json.dumps({"lessons": entries})
    first_note = _NOTE.search(user_text)
    words = user_text[: first_note.start()] if first_note else user_text
    notes = _NOTE.findall(user_text[first_note.start() :]) if first_note else []
    prefix = "[Offline model] "
    if _GREETING.match(words) and not notes:
        return (
            prefix + "Hello! I'm Spark AI Agent, running with the offline model because no "
            "language model is configured. Set SPARK_MODEL and its provider's API key to talk "
            "to a real model."
        )
    quoted = " ".join(words.split())
    if len(quoted) > 200:
        quoted = quoted[:199] + "…"
    said = f"You said: “{quoted}”." if quoted else ""
    seen = ""
    if notes:
        seen = _attached(notes) + f" I can't look at {'it' if len(notes) == 1 else 'them'},"
        seen += " being the offline model, but"
        rest = " your message has been saved and the streaming path works end to end."
    else:
        rest = (
            " I'm the offline model, so I can't think about it, but your message has been "
            "saved and the streaming path works end to end."
        )
    return (prefix + said + seen + rest).replace("  ", " ")


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
        reply = compose_reply(last_user)
        words = re.findall(r"\S+\s*", reply)
        for word in words:
            if self._token_delay:
                await self._clock.sleep(self._token_delay)
            yield TextDelta(word)
        usage = Usage(input_tokens=len(last_user.split()), output_tokens=len(words))
        yield Finish("stop", usage)
