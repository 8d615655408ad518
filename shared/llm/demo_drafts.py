"""What the demo model writes when a task tool asks it to draft: a lesson (XML valid
against ``shared/lessons/grammar/``), a plan (JSON), a review (JSON); and a
conversation's title (``prompts/title.md``), from the first words of its first message.

The task tools call the model without tools and with a system prompt of their own
(``prompts/lesson.md``, ``plan.md``, ``review.md``); the demo model knows these calls
by that prompt and by the first words of the brief the tool writes, and answers them
as a model would, from the brief's fields. What it writes is a sample, and says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal

from shared.llm.base import ChatMessage, ModelRequest

Draft = Literal["lesson", "plan", "review", "title"]

_FIELD = re.compile(r"^(Topic|Learners|Duration|This lesson): (.+)$", re.M)
_MINUTES = re.compile(r"(\d+) minutes")
_COUNT = re.compile(r"^Plan a sequence of (\d+) lessons")
_MARK = re.compile(r"Give a mark out of (\d+)\.")
_WORK = re.compile(r'The work, "([^"\n]*)"')

SAMPLE_NOTE = "Written by the offline demo model: a sample lesson, not a real draft."

_STAGES = (
    "Getting started",
    "The key ideas",
    "Looking closer",
    "Putting it to work",
    "Investigating",
    "Making connections",
    "Practice makes progress",
    "Applying what we know",
    "Review",
    "Showing what we know",
)

# Two true statements and a false one for the one topic the examples use; any other
# topic gets statements about the lesson itself (true whatever the topic is).
_FACTS: dict[str, tuple[str, str, str, str]] = {
    "water cycle": (
        "The Sun's heat makes water evaporate from seas, rivers and lakes.",
        "Water vapour cools and condenses into the droplets that make clouds.",
        "Rain, snow and hail are called evaporation.",
        "Water falling from clouds is called precipitation.",
    ),
}


def draft_kind(request: ModelRequest) -> Draft | None:
    """Which drafting call ``request`` is, or ``None`` for a conversation turn."""
    if request.tools or not request.messages:
        return None
    first = request.messages[0].text
    if "writing a lesson" in request.system or first.startswith("Write the lesson."):
        return "lesson"
    if "planning a sequence of lessons" in request.system or _COUNT.match(first):
        return "plan"
    if "reviewing a piece of work" in request.system or first.startswith("Review this piece"):
        return "review"
    if "titling a conversation" in request.system or first.startswith("Title this conversation."):
        return "title"
    return None


def draft(kind: Draft, messages: Sequence[ChatMessage]) -> str:
    """The demo model's whole reply to a drafting call of ``kind`` (a repair gets the
    same reply as the first draft: it was valid)."""
    brief = messages[0].text
    if kind == "lesson":
        return lesson_xml(brief)
    if kind == "plan":
        return plan_json(brief)
    if kind == "title":
        return title_of(brief)
    return review_json(brief)


_WROTE = re.compile(r"The person wrote:\n(.*?)(?:\n\nSpark AI Agent replied:|\Z)", re.S)


def title_of(brief: str) -> str:
    """A conversation's title from the first words of its first message (at most six,
    and 60 characters), as the offline model makes one."""
    found = _WROTE.search(brief)
    words = (found.group(1) if found else brief).split()[:6]
    title = " ".join(words)[:60].strip(" .,;:!?")
    return title[:1].upper() + title[1:]


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attr(text: str) -> str:
    return _xml(text).replace('"', "&quot;")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _timings(duration: int) -> tuple[int, int, int]:
    starter = max(5, round(duration / 6))
    review = max(5, round(duration / 4))
    return starter, duration - starter - review, review


def _statements(topic: str) -> tuple[str, str, str, str]:
    """Two true statements, a false one and why it is false."""
    for key, facts in _FACTS.items():
        if key in topic.lower():
            return facts
    return (
        f"This lesson is about {topic}.",
        f"By the end of the lesson, learners can describe one idea about {topic}.",
        f"This lesson is about something other than {topic}.",
        f"The lesson is about {topic}.",
    )


def lesson_xml(brief: str) -> str:
    """A small, complete lesson on the brief's topic (or its plan's focus)."""
    fields = dict(_FIELD.findall(brief))
    topic = fields.get("Topic", "the topic").strip()[:120]
    focus = fields.get("This lesson", "").strip()
    title = focus.split(": ", 1)[0][:120] if focus else _capital(topic)
    learners = fields.get("Learners", "the class").strip()[:100]
    minutes = _MINUTES.match(fields.get("Duration", ""))
    duration = int(minutes.group(1)) if minutes else 45
    starter, main, review = _timings(duration)
    facts = _statements(topic)
    true1, true2, _, why = (_attr(s) for s in facts)
    shown1, shown2, shown3, _ = (_xml(s) for s in facts)
    t, who = _xml(topic), _xml(learners)
    return f"""<lesson>
<h1>{_xml(title)}</h1>
<note>{SAMPLE_NOTE}</note>
<h2>Objectives</h2>
<ul>
<li>Describe the key ideas of {t}.</li>
<li>Explain one example of {t} in everyday life.</li>
</ul>
<h2>Timings</h2>
<ol>
<li>{starter} min – starter: what do we already know about {t}?</li>
<li>{main} min – main activity and true or false</li>
<li>{review} min – quiz and review</li>
</ol>
<h2>Starter</h2>
<p>In pairs, the learners ({who}) list three things they already know about {t}.</p>
<h2>Main activity</h2>
<p>Talk through the key ideas of {t} with a diagram, then try the statements below.</p>
<exercise id="ex-1" type="true-false">
<h3>True or false?</h3>
<statement id="s-1" answer="true" explanation="{true1}" student-answer="">{shown1}</statement>
<statement id="s-2" answer="false" explanation="{why}" student-answer="">{shown3}</statement>
<statement id="s-3" answer="true" explanation="{true2}" student-answer="">{shown2}</statement>
</exercise>
<h2>Quiz</h2>
<exercise id="ex-2" type="multiple-choice">
<h3>Choose the correct answer.</h3>
<question id="q-1">
<prompt>What is this lesson about?</prompt>
<option correct="true">{t}</option>
<option>Something else entirely</option>
</question>
</exercise>
<h2>Differentiation</h2>
<ul>
<li>Support: a labelled diagram and a word bank.</li>
<li>Stretch: explain the ideas in their own words to a partner.</li>
</ul>
<h2>Assessment</h2>
<p>The true-or-false answers and the quiz show who has the key ideas.</p>
<h2>Resources</h2>
<ul>
<li>A diagram of {t}; mini whiteboards.</li>
</ul>
</lesson>"""


def plan_json(ask: str) -> str:
    """``{"lessons": [{"title", "focus"}, …]}`` with as many entries as asked for."""
    count = _COUNT.match(ask)
    wanted = min(max(int(count.group(1)), 1), len(_STAGES)) if count else 1
    fields = dict(_FIELD.findall(ask))
    topic = fields.get("Topic", "the topic").strip()[:120]
    lessons = [
        {
            "title": f"{_capital(topic)}: {_STAGES[i].lower()}",
            "focus": f"{_STAGES[i]}: lesson {i + 1} of {wanted} on {topic}.",
        }
        for i in range(wanted)
    ]
    return json.dumps({"lessons": lessons}, ensure_ascii=False)


def review_json(ask: str) -> str:
    """Feedback of the form ``prompts/review.md`` asks for (a mark only when asked)."""
    out_of = _MARK.search(ask)
    work = _WORK.search(ask)
    name = work.group(1) if work else "the work"
    mark = None
    if out_of:
        total = int(out_of.group(1))
        mark = {
            "score": -(-total * 7 // 10),
            "outOf": total,
            "reason": "A sample mark from the demo model.",
        }
    feedback = {
        "summary": f"A sample review of {name} by the offline demo model.",
        "strengths": [
            "The work is set out clearly, one step at a time.",
            "Each answer is written in full.",
        ],
        "corrections": [
            {
                "where": "the last answer",
                "issue": "It gives no reason.",
                "suggestion": "Add one sentence that says why.",
            }
        ],
        "nextSteps": ["Check each answer once more against the question."],
        "mark": mark,
        "question": None,
    }
    return json.dumps(feedback, ensure_ascii=False)
