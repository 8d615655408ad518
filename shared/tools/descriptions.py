"""What each tool's result shows, said in words (DESIGN §9).

A client shows a tool's result as something to look at (a lesson card, a review's
marks); voice needs it said. Each tool has its own ``describe`` here, from its
arguments and its output, so that its result part carries a ``description`` a spoken
reply reads in its place. A test walks every tool of ``build_tools`` through its
describer, so a new tool without one fails it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from shared.schemas.documents import short
from shared.tools.quoting import unfenced

Describe = Callable[[BaseModel, Any], str]


def _get(value: Any, key: str, default: Any = None) -> Any:
    return value.get(key, default) if isinstance(value, Mapping) else default


def _title(value: Any) -> str:
    return f"“{_get(value, 'title') or 'Untitled lesson'}”"


def _lesson_card(args: BaseModel, value: Any) -> str:
    outline = [str(o) for o in _get(value, "outline") or []]
    covers = f", covering: {'; '.join(outline)}" if outline else ""
    return f"A lesson card: {_title(value)}{covers}."


def _planned(args: BaseModel, value: Any) -> str:
    lessons = _get(value, "lessons") or []
    titles = ", ".join(_title(item) for item in lessons)
    return f"Cards for {len(lessons)} lessons in order: {titles}."


def _review(args: BaseModel, value: Any) -> str:
    name = _get(value, "name") or "the work"
    if _get(value, "status") == "needs_answer":
        question = _get(_get(value, "question"), "question") or "a question"
        return f"Before reviewing {name}, Spark AI Agent needs to know: {question}"
    feedback = _get(value, "feedback") or {}
    said = [f"A review of {name}: {_get(feedback, 'summary') or 'feedback'}."]
    strengths = _get(feedback, "strengths") or []
    if strengths:
        said.append(f"Strengths: {'; '.join(str(s) for s in strengths)}.")
    corrections = _get(feedback, "corrections") or []
    if corrections:
        said.append(f"{len(corrections)} corrections are marked on the work.")
    mark = _get(feedback, "mark")
    if isinstance(mark, Mapping):
        said.append(f"Mark: {mark.get('score')} out of {mark.get('outOf')}.")
    return " ".join(said)


def _answers(args: BaseModel, value: Any) -> str:
    answers = _get(value, "answers") or {}
    chosen = [
        f"{q}: {', '.join(a) if isinstance(a, list) else a}" for q, a in dict(answers).items()
    ]
    return f"Your answers: {'; '.join(chosen)}." if chosen else "Your answers."


DESCRIBERS: dict[str, Describe] = {
    "load_skill": lambda args, value: (
        f"Read the guide to {str(getattr(args, 'skill', 'this')).replace('-', ' ')}."
    ),
    "read_document": lambda args, value: "Read the open lesson.",
    "search_document": lambda args, value: (
        f"Searched the open lesson for “{getattr(args, 'query', '')}”."
    ),
    "get_document_info": lambda args, value: (
        f"The lesson {_title(value)}: {_get(value, 'words', 0)} words, "
        f"version {_get(value, 'version', 1)}."
    ),
    "edit_document": lambda args, value: (
        f"Edited the open lesson; it is now version {_get(value, 'version', '?')}."
    ),
    "create_lesson": _lesson_card,
    "plan_lessons": _planned,
    "ask_user_question": _answers,
    "get_editor_selection": lambda args, value: "The text selected in your editor.",
    "delete_lesson": lambda args, value: f"Deleted the lesson {_title(value)}.",
    "restore_lesson": lambda args, value: (
        f"Restored version {_get(value, 'restored', '?')} of the lesson {_title(value)}."
    ),
    "review_work": _review,
    # Family messages: counts and names only. A description is read aloud and kept
    # beside the result, so it never repeats a member's words (an opt-out must hold).
    # Names reach the model fenced (``quoting.py``); people hear them as chosen.
    "list_family_members": lambda args, value: (
        f"The members of {unfenced(str(_get(value, 'family') or 'the family'))}: "
        f"{len(_get(value, 'members') or [])}."
    ),
    "read_family_messages": lambda args, value: (
        f"Read {len(_get(value, 'messages') or [])} family message"
        f"{'s' * (len(_get(value, 'messages') or []) != 1)}."
    ),
    "send_family_message": lambda args, value: f"Sent a message to {_recipient(value)}.",
}


def _recipient(value: Any) -> str:
    """Whom a ``send_family_message`` call (its arguments or its result) names, as its
    card does."""
    return unfenced(str(_get(value, "recipient") or _get(value, "to") or "the family"))


def _asks_to_send(args: Mapping[str, Any]) -> str:
    return f"Spark AI Agent asks to send a message to {_recipient(args)}."


# A call's own part, where its display text would say too much. ``send_family_message``'s
# card shows the exact text to approve, but the part's description is read aloud and
# kept: the text may be another member's words, forwarded, which an opt-out withholds.
CALL_DESCRIBERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "send_family_message": _asks_to_send,
}


def describe_call(tool: str, args_json: str) -> str | None:
    """The description of a call's part (``None``: its display text says it)."""
    describer = CALL_DESCRIBERS.get(tool)
    if describer is None:
        return None
    try:
        args = json.loads(args_json)
        return short(describer(args if isinstance(args, Mapping) else {}))
    except Exception:  # a description must never fail the call it describes
        return None


def describe_output(tool: str, args: BaseModel, value: Any) -> str | None:
    """The description of ``tool``'s output ``value`` for ``args`` (``None``: a tool
    with no describer, whose part gets the generic one)."""
    describer = DESCRIBERS.get(tool)
    if describer is None:
        return None
    try:
        return short(describer(args, value))
    except Exception:  # a description must never fail the call it describes
        return None


def describe_failure(error: str) -> str:
    return short(f"This step did not work: {error}")
