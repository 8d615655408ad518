"""Every kind of lesson write, as a script a test runs against a lesson store, and what
the family's progress must say after each step (issue 34): the unit tests run it on the
in-memory store (Hypothesis), the store contract on Firestore's emulator too."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from hypothesis import strategies as st

from shared.errors import NotFound, VersionConflict
from shared.families import progress as family_progress
from shared.lessons import grammar, progress
from shared.schemas.documents import FamilyMember, Lesson
from shared.store import versions
from shared.store.base import LessonStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)
Kind = Literal["create", "answer", "restore", "delete", "forget"]
"""``create`` a lesson (or bring a deleted one back by creating it anew); ``answer``: a
student's answers saved (the next version, some blanks filled or emptied); ``restore``
a kept version (a deleted lesson comes back); ``delete`` it; ``forget`` the user's
summary, as if their lessons had been written before summaries existed."""


@dataclass(frozen=True)
class Op:
    kind: Kind
    lesson: int  # which of the user's lessons (a few, so steps meet the same ones)
    blanks: int = 0
    answers: tuple[bool, ...] = ()  # which blanks are answered (cycled)
    back: int = 1  # for ``restore``: how many versions back
    skew: int = 0  # seconds the writer's clock is behind (instances' clocks differ)
    read: bool = True  # the progress is asked for after it (a read refills a summary)


def body(blanks: int, answers: Sequence[bool], title: str) -> str:
    given = [bool(answers) and answers[n % len(answers)] for n in range(blanks)]
    filled = [
        f'<blank answer="a{n}" student-answer="{"x" if done else ""}"/>'
        for n, done in enumerate(given)
    ]
    exercise = (
        f'<exercise id="e1" type="fill-blanks"><p>Fill {" and ".join(filled)}.</p></exercise>'
        if blanks
        else "<p>No blanks.</p>"
    )
    return f"<lesson><h1>{title}</h1>{exercise}</lesson>"


ops = st.lists(
    st.builds(
        Op,
        kind=st.sampled_from(
            ["create", "create", "answer", "answer", "restore", "delete", "forget"]
        ),
        lesson=st.integers(0, 6),
        blanks=st.integers(0, 5),
        answers=st.lists(st.booleans(), max_size=5).map(tuple),
        back=st.integers(1, 3),
        skew=st.sampled_from([0, 0, 0, 2, 7]),
        read=st.booleans(),
    ),
    max_size=30,
)


def oracle(lesson: Lesson) -> tuple[int, int]:
    """The blanks as the tree says (the old count, independent of ``grammar.blanks``)."""
    root = grammar.parse(lesson.body)
    found = [n for n in root.walk() if n.tag == "blank"]
    return len(found), sum(bool(n.attrs.get("student-answer", "").strip()) for n in found)


async def apply(
    store: LessonStore, uid: str, op: Op, now: datetime, forget: Callable[[], Awaitable[None]]
) -> None:
    """One write (or none, when it does not apply: an answer to a lesson not there)."""
    lesson_id = f"les_{op.lesson}"
    if op.skew:
        # Behind, and never equal to another step's time (ties would make "newest" moot).
        now -= timedelta(seconds=op.skew, microseconds=now.second + 1)
    current = await store.get(uid, lesson_id)
    if op.kind == "forget":
        await forget()
    elif op.kind == "create" and current is None:
        title = f"Lesson {op.lesson} at {now:%H:%M:%S}"
        made = Lesson(
            id=lesson_id,
            title=title,
            body=body(op.blanks, op.answers, title),
            version=1 + max((k.version for k in await store.versions(uid, lesson_id)), default=0),
            created_at=now,
            updated_at=now,
        )
        await store.create(uid, made)
    elif op.kind in ("create", "answer") and current is not None:
        blanks = op.blanks if op.kind == "create" else oracle(current)[0]
        edited = current.model_copy(
            update={
                "body": body(blanks, op.answers, current.title),
                "version": current.version + 1,
                "updated_at": now,
            }
        )
        await store.replace(uid, edited, current.version)
    elif op.kind == "restore":
        kept = await store.versions(uid, lesson_id)
        if len(kept) >= op.back:
            with contextlib.suppress(NotFound, VersionConflict):
                await versions.restore(store, uid, lesson_id, kept[op.back - 1].version, now)
    elif op.kind == "delete":
        await store.delete(uid, lesson_id)


async def check(store: LessonStore, uid: str, shown: int) -> None:
    """The family's progress of ``uid`` is what the lessons say: their ``shown`` newest,
    each with its blanks counted from its XML."""
    member = FamilyMember(user_id=uid, display_name="Kid", role="dependent", joined_at=T0)
    (got,) = await family_progress.of_members(store, [member], shown)
    expected = [
        (lesson.id, lesson.title, lesson.updated_at, *oracle(lesson))
        for lesson in await store.recent(uid, shown)
    ]
    listed = [(p.lesson_id, p.title, p.updated_at, p.blanks, p.answered) for p in got.lessons]
    assert listed == expected


async def run(
    store: LessonStore,
    uid: str,
    script: Sequence[Op],
    forget: Callable[[], Awaitable[None]],
    shown: int,
    summary: Callable[[], Awaitable[dict[str, object] | None]] | None = None,
    kept: int = progress.KEPT,
) -> None:
    """Each step of ``script``, and after each one the stored summary checked against
    every lesson (given ``summary``: ``progress.violations``), and the progress too after
    those that ask for it (``Op.read``) and at the end."""
    for step, op in enumerate(script):
        now = T0 + timedelta(seconds=step + 1)
        await apply(store, uid, op, now, forget)
        if summary is not None:
            everything = await store.recent(uid, 1000)
            assert progress.violations(await summary(), everything, kept) == [], (step, op)
        if op.read:
            await check(store, uid, shown)
    await check(store, uid, shown)
