"""The lesson grammar itself: every element, its attributes and where it may go, declared
once in ``ELEMENTS``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MAX_LESSON_CHARS = 200_000
"""A lesson body's limit: far below Firestore's 1 MiB, far above any real lesson."""


MAX_DEPTH = 12


EXERCISE_TYPES = (
    "fill-blanks",
    "multiple-choice",
    "true-false",
    "sequencing",
    "short-answer",
    "writing",
)


_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Attr:
    """One attribute: required or not, and what values it takes."""

    required: bool = False
    values: tuple[str, ...] = ()
    integer: tuple[int, int] | None = None
    id: bool = False
    nonempty: bool = False

    def problem(self, value: str) -> str | None:
        """Why ``value`` is not allowed, or ``None``."""
        if self.values and value not in self.values:
            return "must be one of " + ", ".join(f'"{v}"' for v in self.values)
        if self.integer is not None:
            low, high = self.integer
            if not value.isdigit() or not low <= int(value) <= high:
                return f"must be a whole number from {low} to {high}"
        if self.id and not _ID.match(value):
            return "must start with a letter and use only letters, digits, - and _ (at most 64)"
        if self.nonempty and not value.strip():
            return "must not be empty"
        return None


@dataclass(frozen=True, slots=True)
class Element:
    """What one element may hold.

    ``within``: the exercise types it may appear in (empty: anywhere it is allowed).
    """

    attrs: Mapping[str, Attr]
    children: tuple[str, ...] = ()
    text: bool = False
    within: tuple[str, ...] = ()


_INLINE = ("b", "i", "br")


_OPTIONAL_ID = {"id": Attr(id=True)}


_REQUIRED_ID = {"id": Attr(required=True, id=True)}


_MARKS = Attr(integer=(0, 100))


ELEMENTS: Mapping[str, Element] = {
    "lesson": Element({}, ("h1", "h2", "h3", "p", "ul", "ol", "exercise", "writing-area", "note")),
    "h1": Element(_OPTIONAL_ID, _INLINE, text=True),
    "h2": Element(_OPTIONAL_ID, _INLINE, text=True),
    "h3": Element(_OPTIONAL_ID, _INLINE, text=True),
    "p": Element(_OPTIONAL_ID, (*_INLINE, "blank"), text=True),
    "ul": Element(_OPTIONAL_ID, ("li",)),
    "ol": Element(_OPTIONAL_ID, ("li",)),
    "li": Element(_OPTIONAL_ID, (*_INLINE, "blank"), text=True),
    "b": Element({}, ("i", "br"), text=True),
    "i": Element({}, ("b", "br"), text=True),
    "br": Element({}),
    "note": Element({}, _INLINE, text=True),
    "writing-area": Element(
        {
            "id": Attr(id=True),
            "lines": Attr(integer=(1, 60)),
            "min-words": Attr(integer=(1, 5000)),
            "max-words": Attr(integer=(1, 5000)),
            "student-answer": Attr(),
        }
    ),
    "exercise": Element(
        {"id": Attr(required=True, id=True), "type": Attr(required=True, values=EXERCISE_TYPES)},
        (
            "h3",
            "p",
            "ul",
            "ol",
            "note",
            "question",
            "statement",
            "item",
            "prompt",
            "writing-area",
            "rubric",
        ),
    ),
    "blank": Element(
        {
            "id": Attr(id=True),
            "answer": Attr(required=True, nonempty=True),
            "alts": Attr(),
            "hint": Attr(),
            "student-answer": Attr(required=True),
        },
        within=("fill-blanks",),
    ),
    "question": Element(
        {**_REQUIRED_ID, "marks": _MARKS},
        ("prompt", "option", "model-answer", "writing-area", "note"),
        within=("multiple-choice", "short-answer"),
    ),
    "prompt": Element(
        {}, _INLINE, text=True, within=("multiple-choice", "short-answer", "writing")
    ),
    "option": Element(
        {"id": Attr(id=True), "correct": Attr(values=("true", "false"))},
        _INLINE,
        text=True,
        within=("multiple-choice",),
    ),
    "model-answer": Element({}, _INLINE, text=True, within=("short-answer",)),
    "statement": Element(
        {
            **_REQUIRED_ID,
            "answer": Attr(required=True, values=("true", "false")),
            "explanation": Attr(),
            "student-answer": Attr(values=("", "true", "false")),
        },
        _INLINE,
        text=True,
        within=("true-false",),
    ),
    "item": Element(
        {**_REQUIRED_ID, "order": Attr(required=True, integer=(1, 50))},
        _INLINE,
        text=True,
        within=("sequencing",),
    ),
    "rubric": Element({}, ("criterion",), within=("writing", "short-answer")),
    "criterion": Element(
        {"marks": Attr(required=True, integer=(0, 100))}, _INLINE, text=True, within=()
    ),
}
