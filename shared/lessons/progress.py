"""A user's lesson progress, kept as data (``LessonsProgress``) by the lesson store in the
same write as each lesson it creates, replaces (an edit, a student's answers, a restore)
or deletes, so that ``GET /api/spark/families/{id}/progress`` reads one small document per
member and parses nothing (issue 34: it parsed every member's 50 lessons on the event
loop on every request; bench/family_data.py (a) measures the request).

``counts`` is the one place a lesson's blanks are counted; both stores call it in their
write methods, never anyone else, so the summary cannot drift from the lessons.

The summary holds the ``KEPT`` most recently updated lessons (more than the ``SHOWN``, so
that deleting some rarely leaves fewer than ``SHOWN`` while older ones exist): every
lesson not in it was updated no later than the oldest in it. A summary that cannot
answer (none yet: lessons written before it existed; or fewer than ``SHOWN`` kept while
older lessons exist) is rebuilt from the user's newest ``KEPT`` lessons by the next
progress request, counted off the event loop (``refill``), and written only over the
version it read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from shared.lessons import grammar
from shared.lessons.grammar import InvalidLesson
from shared.schemas.documents import Lesson
from shared.schemas.server import LessonCounts, LessonsProgress

SHOWN = 50
"""The lessons shown per member, the most recently updated first."""
KEPT = 100
"""The lessons a summary keeps (~30 KB at most: 200-character titles)."""


def summary_path(user_id: str) -> tuple[str, ...]:
    """Where the user's summary lives: server-only (rules deny every client)."""
    return (user_id, "server", "progress", "lessons")


def counts(lesson: Lesson) -> LessonCounts:
    """The lesson's blanks (``<blank>``) and how many carry a ``student-answer`` that is
    not empty. A stored lesson is always valid; one that is not counts no blanks."""
    try:
        blanks, answered = grammar.blanks(lesson.body)
    except InvalidLesson:
        blanks = answered = 0
    return LessonCounts(
        title=lesson.title, updated_at=lesson.updated_at, blanks=blanks, answered=answered
    )


def _key(item: tuple[str, LessonCounts]) -> tuple[datetime, str]:
    """Newest first by this key, reversed: the last change, then the id (ties)."""
    lesson_id, counted = item
    return counted.updated_at, lesson_id


def newest(summary: LessonsProgress) -> list[tuple[str, LessonCounts]]:
    """The summary's lessons, the most recently updated first."""
    return sorted(summary.lessons.items(), key=_key, reverse=True)


def started(alone: bool) -> LessonsProgress:
    """The summary of a user who has none yet: complete (and empty) when they have no
    other lesson; otherwise empty and not complete, which the next progress request
    refills from their lessons."""
    return LessonsProgress(complete=alone)


def recorded(
    summary: LessonsProgress, lesson_id: str, counted: LessonCounts, kept: int = KEPT
) -> LessonsProgress:
    """``summary`` after the lesson ``lesson_id`` was written with ``counted``.

    A summary that is not complete knows only that the lessons it lacks were updated no
    later than its oldest one (taken before this lesson's own entry goes): a lesson
    updated earlier than that cannot be placed, so it is left out (and its old entry
    dropped). Past ``kept`` the oldest entry goes, and the summary is no longer complete.
    """
    lessons = dict(summary.lessons)
    floor = min(map(_key, lessons.items()), default=None)
    lessons.pop(lesson_id, None)
    complete = summary.complete
    if complete or (floor is not None and _key((lesson_id, counted)) >= floor):
        lessons[lesson_id] = counted
        if len(lessons) > kept:
            oldest = min(lessons.items(), key=_key)[0]
            del lessons[oldest]
            complete = False
    return summary.model_copy(
        update={"lessons": lessons, "complete": complete, "writes": summary.writes + 1}
    )


def forgotten(summary: LessonsProgress, lesson_id: str) -> LessonsProgress:
    """``summary`` after the lesson ``lesson_id`` was deleted."""
    lessons = {k: v for k, v in summary.lessons.items() if k != lesson_id}
    return summary.model_copy(update={"lessons": lessons, "writes": summary.writes + 1})


def answers(summary: LessonsProgress | None, shown: int = SHOWN) -> bool:
    """Whether ``summary`` can answer a progress request (else it is refilled first)."""
    return summary is not None and (summary.complete or len(summary.lessons) >= shown)


def summarized(lessons: Sequence[Lesson], writes: int, kept: int = KEPT) -> LessonsProgress:
    """The summary of the user's ``kept`` newest lessons (``lessons``, as a query gave
    them, newest first: all of them when fewer than ``kept``). Parses every one: run it
    off the event loop."""
    chosen = sorted(lessons, key=lambda lesson: (lesson.updated_at, lesson.id), reverse=True)
    return LessonsProgress(
        lessons={lesson.id: counts(lesson) for lesson in chosen[:kept]},
        complete=len(lessons) < kept,
        writes=writes + 1,
    )


def violations(
    summary: Mapping[str, object] | None, lessons: Sequence[Lesson], kept: int = KEPT
) -> list[str]:
    """What is wrong with a stored summary given every one of the user's lessons (the
    audit's ``lesson_progress``): an entry that says otherwise than its lesson, a
    lesson newer than the oldest entry left out, ``complete`` with a lesson missing, or
    more than ``kept`` entries. No summary is never wrong (it is refilled when read)."""
    if summary is None:
        return []
    try:
        stored = LessonsProgress.model_validate(summary)
    except ValueError as exc:
        return [f"the summary does not validate: {exc}"]
    found: list[str] = []
    by_id = {lesson.id: lesson for lesson in lessons}
    for lesson_id, counted in stored.lessons.items():
        lesson = by_id.get(lesson_id)
        if lesson is None:
            found.append(f"{lesson_id}: in the summary, but there is no such lesson")
        elif counted != counts(lesson):
            found.append(f"{lesson_id}: the summary says {counted}, the lesson {counts(lesson)}")
    floor = min(map(_key, stored.lessons.items()), default=None)
    for lesson in lessons:
        if lesson.id in stored.lessons:
            continue
        if stored.complete:
            found.append(f"{lesson.id}: missing from a summary that says it is complete")
        elif floor is not None and (lesson.updated_at, lesson.id) > floor:
            found.append(f"{lesson.id}: newer than the summary's oldest lesson, yet left out")
    if len(stored.lessons) > kept:
        found.append(f"{len(stored.lessons)} lessons kept, more than {kept}")
    return found
