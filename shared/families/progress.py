"""Lesson progress of a family's members (``GET /api/spark/families/{id}/progress``):
for each member, their newest lessons with how many blanks each has and how many of
those carry the student's answer (no member reads another's subtree).

Nothing is parsed here: the lesson store keeps each user's counts as data, written with
every lesson change (``shared/lessons/progress.py``), and a request reads one small
document per member. A member whose summary cannot answer yet (lessons written before
summaries existed, or fewer kept than shown while older lessons exist) has it rebuilt
from their newest lessons first, counted off the event loop (``LessonStore.refill``):
at most ``progress.KEPT`` lessons, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.lessons import progress
from shared.schemas.documents import FamilyMember, FamilyRole
from shared.store.base import LessonStore

MAX_LESSONS = progress.SHOWN


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


async def of_members(
    lessons: LessonStore, members: Sequence[FamilyMember], shown: int = MAX_LESSONS
) -> list[MemberProgress]:
    """Each member's ``shown`` most recently updated lessons, from their summaries (read
    together), each refilled first if it cannot answer.

    Raises:
        StoreError: the store failed.
    """
    summaries = await lessons.progress([m.user_id for m in members])
    found: list[MemberProgress] = []
    for member in members:
        summary = summaries.get(member.user_id)
        if summary is None or not progress.answers(summary, shown):
            summary = await lessons.refill(member.user_id)
        listed = [
            LessonProgress(lesson_id, c.title, c.updated_at, c.blanks, c.answered)
            for lesson_id, c in progress.newest(summary)[:shown]
        ]
        found.append(MemberProgress(member.user_id, member.display_name, member.role, listed))
    return found
