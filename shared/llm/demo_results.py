"""What the demo model (``demo``) says once a tool's result comes back: a few words about
each tool's output, drawn from it, as a model would answer."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from shared.prose import listed

QUIZ_ANSWER = "Condensation"
"""The answer to the demo's quiz question (``demo``'s water-cycle quiz)."""


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _lesson_made(output: dict[str, Any]) -> str:
    parts = [p for p in output.get("outline", []) if not str(p).startswith("exercise")]
    exercises = len(output.get("outline", [])) - len(parts)
    return (
        f"Your lesson “{output.get('title', '')}” is ready and open here: "
        f"{listed([str(p) for p in parts[1:]])}, with {exercises} exercises. I wrote it as "
        "the demo model, so it is a sample that shows the tools at work."
    )


def _planned(output: dict[str, Any]) -> str:
    titles = [f"“{lesson.get('title', '')}”" for lesson in output.get("lessons", [])]
    return f"Your {len(titles)} lessons are written: {listed(titles)}. The first is open here."


def _deleted(output: dict[str, Any]) -> str:
    return (
        f"I deleted “{output.get('title', 'the lesson')}”. Its recent versions are kept, so "
        "it can be restored."
    )


def _quizzed(output: dict[str, Any]) -> str:
    answers = output.get("answers") or [{}]
    chosen = ", ".join(answers[0].get("answer") or []) or "nothing"
    if chosen == QUIZ_ANSWER:
        return (
            f"You chose {chosen}: that's right! Water vapour cools and condenses into the "
            "droplets that make clouds."
        )
    return (
        f"You chose {chosen}. Not quite: it is condensation. Evaporation turns water into "
        "vapour, and precipitation is the rain, snow or hail that falls."
    )


_FENCED_NAME = re.compile(r"<<(quote-[0-9a-f]+) [a-z ]+>>(.*?)<<end \1>>", re.DOTALL)


def member_name(value: object) -> str:
    """A member's name as a person reads it: the family tools fence every name a member
    chose (``shared/tools/quoting.fenced_name``)."""
    return _FENCED_NAME.sub(lambda m: m.group(2), str(value or ""))


def _unquoted(text: str) -> str:
    """A family message's own words, without the markers the tool fences it with."""
    lines = text.splitlines()
    inner = lines[1:-1] if len(lines) >= 3 and lines[0].startswith("<<") else lines
    return " ".join(" ".join(inner).split())


def _read(output: dict[str, Any]) -> str:
    messages = output.get("messages") or []
    if not messages:
        return str(output.get("note", "There are no family messages yet."))
    said = []
    for entry in messages[-5:]:
        author = member_name(entry.get("from", {}).get("displayName")) or "Someone"
        if "withheld" in entry:
            said.append(f"{author}: (withheld: they turned off the agent reading it)")
        else:
            said.append(f"{author}: “{_unquoted(str(entry.get('text', '')))}”")
    return f"The newest family messages: {'; '.join(said)}."


def _sent(output: dict[str, Any]) -> str:
    if output.get("to") in (None, "family"):
        return "Sent to your family."
    return f"Sent to {member_name(output.get('recipient')) or 'them'}."


def _reviewed(output: dict[str, Any]) -> str:
    if output.get("status") != "reviewed":
        return str(output.get("note", "The work could not be reviewed."))
    feedback = output.get("feedback", {})
    said = [f"Feedback on {output.get('name', 'your work')}: {feedback.get('summary', '')}"]
    if feedback.get("strengths"):
        said.append("Well done: " + " ".join(feedback["strengths"]))
    for correction in feedback.get("corrections", []):
        said.append(f"To fix: {correction.get('issue', '')} {correction.get('suggestion', '')}")
    if feedback.get("nextSteps"):
        said.append("Next: " + " ".join(feedback["nextSteps"]))
    mark = feedback.get("mark")
    if mark:
        said.append(f"Mark: {mark.get('score')} out of {mark.get('outOf')}.")
    return " ".join(s.strip() for s in said)


def _loaded(output: dict[str, Any]) -> str:
    lines = str(output.get("instructions", "")).splitlines()
    first = next((line[2:] for line in lines if line.startswith("- ")), "")
    return (
        f"I've read the {output.get('skill', '')} rules, as a model does before it writes "
        f"that kind of exercise. The first: {first}"
    ).strip()


def _done(output: dict[str, Any]) -> str:
    return "Done."


_ABOUT: dict[str, Callable[[dict[str, Any]], str]] = {
    "create_lesson": _lesson_made,
    "plan_lessons": _planned,
    "delete_lesson": _deleted,
    "ask_user_question": _quizzed,
    "read_family_messages": _read,
    "send_family_message": _sent,
    "review_work": _reviewed,
    "load_skill": _loaded,
}


def about(tool: str, output: dict[str, Any]) -> str:
    """A few words about ``tool``'s ``output``."""
    return _ABOUT.get(tool, _done)(output)
