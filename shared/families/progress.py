"""Lesson progress of a family's members (``GET /api/spark/families/{id}/progress``):
for each member, their lessons with how many blanks each has and how many of those
carry the student's answer, counted on the server from the lessons' XML (no member
reads another's subtree)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from shared.lessons.grammar import InvalidLesson, parse
from shared.schemas.documents import FamilyRole, Lesson

# The lessons shown per member, the most recently updated first: bounded, so the answer
# (and the reads behind it) stays small however many lessons a member has.
MAX_LESSONS = 50


@dataclass(frozen=True, slots=True)
class LessonProgress:
    lesson_id: str
    title: str
    updated_at: datetime
    blanks: int
    answered: int


@dataclass(frozen=True, slots=True)
class MemberProgress:
    user_id: str
    display_name: str
    role: FamilyRole
    lessons: list[LessonProgress]


def lesson_progress(lesson: Lesson) -> LessonProgress:
    """The lesson's blanks (``<blank>``) and how many carry a ``student-answer`` that is
    not empty. A stored lesson is always valid; one that is not counts no blanks."""
    blanks = answered = 0
    try:
        root = parse(lesson.body)
    except InvalidLesson:
        root = None
    for node in root.walk() if root is not None else ():
        if node.tag == "blank":
            blanks += 1
            answered += bool(node.attrs.get("student-answer", "").strip())
    return LessonProgress(lesson.id, lesson.title, lesson.updated_at, blanks, answered)
