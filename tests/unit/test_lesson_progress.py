"""The family's progress kept as data (issue 34, defect 7): a progress request reads one
small summary per member and parses no lesson; the summary says what the lessons say
after every kind of write (Hypothesis, on the in-memory store)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from spark_http.app import ApiApp

from shared.auth.base import StaticTokenVerifier, User
from shared.lessons import progress
from shared.lessons.grammar import parser
from shared.llm.scripted import ScriptedProvider
from shared.schemas.documents import Lesson
from shared.store.memory import InMemoryLessonStore
from tests.lesson_ops import Op, body, check, ops, run
from tests.unit.helpers import make_service, serving

MUM, KID = User(uid="mum", name="Mum"), User(uid="kid", name="Sam")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def lesson(n: int, blanks: int, answered: int) -> Lesson:
    at = T0 + timedelta(minutes=n)
    answers = tuple(i < answered for i in range(blanks))
    return Lesson(
        id=f"les_{n}",
        title=f"Lesson {n}",
        body=body(blanks, answers, f"Lesson {n}"),
        version=1,
        created_at=at,
        updated_at=at,
    )


class Parses:
    """Counts every lesson parsed (each parse makes its parser in ``grammar.parser``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        made = parser.create_parser

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return made(*args, **kwargs)

        monkeypatch.setattr(parser, "create_parser", counted)


async def test_a_progress_request_parses_no_lesson(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen failing before the summaries: the request parsed each member's lessons on
    the event loop, every time (3 here; 150 with three members' 50)."""
    harness = make_service(ScriptedProvider([]))
    families = harness.agent.families
    family = await families.create(MUM, "Smiths")
    made = await families.invite(MUM.uid, family.id, "dependent")
    await families.join(KID, made.token)
    for n, (blanks, answered) in enumerate([(3, 1), (0, 0), (4, 4)]):
        await harness.fakes.lessons.create(KID.uid, lesson(n, blanks, answered))
    parses = Parses(monkeypatch)
    users = {"mum-token": MUM, "kid-token": KID}
    api = ApiApp(harness.agent, StaticTokenVerifier(users), harness.settings)
    async with serving(api) as client:
        got = await client.get(
            f"/api/spark/families/{family.id}/progress",
            headers={"Authorization": "Bearer mum-token"},
        )
    assert got.status_code == 200, got.text
    assert parses.count == 0
    kid = got.json()["members"][1]
    assert [(x["lessonId"], x["blanks"], x["answered"]) for x in kid["lessons"]] == [
        ("les_2", 4, 4),
        ("les_1", 0, 0),
        ("les_0", 3, 1),
    ]


async def test_each_write_updates_the_summary_in_the_same_write() -> None:
    store = InMemoryLessonStore()
    one = lesson(1, 2, 0)
    await store.create("kid", one)
    assert (store.summary("kid") or {})["lessons"]["les_1"]["blanks"] == 2
    answered = one.model_copy(
        update={
            "body": body(2, (True, True), one.title),
            "version": 2,
            "updated_at": T0 + timedelta(hours=1),
        }
    )
    await store.replace("kid", answered, 1)
    stored = store.summary("kid") or {}
    assert stored["lessons"]["les_1"]["answered"] == 2
    assert stored["complete"] is True  # a new user's first lesson: nothing older exists
    await store.delete("kid", "les_1")
    assert (store.summary("kid") or {})["lessons"] == {}
    assert store.progress_writes == 3


async def test_lessons_from_before_the_summaries_are_counted_once_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user with lessons but no summary (written before it existed): the first request
    refills it from their newest lessons, counted in a worker thread; the next reads it."""
    store = InMemoryLessonStore()
    for n in range(5):
        await store.create("kid", lesson(n, n, n // 2))
    store._progress.clear()  # as before the summaries
    more = lesson(9, 1, 1)
    await store.create("kid", more)  # a write meanwhile cannot place itself: none yet
    assert (store.summary("kid") or {})["lessons"] == {}
    threads: list[str] = []
    counts = progress.counts

    def counted(found: Lesson) -> Any:
        threads.append(threading.current_thread().name)
        return counts(found)

    monkeypatch.setattr(progress, "counts", counted)
    await check(store, "kid", progress.SHOWN)
    assert store.refills == 1 and len(threads) == 6
    assert all(name != "MainThread" for name in threads)
    await check(store, "kid", progress.SHOWN)
    assert store.refills == 1


@pytest.mark.parametrize(("kept", "shown"), [(progress.KEPT, progress.SHOWN), (4, 3), (2, 2)])
def test_progress_matches_the_lessons_after_every_kind_of_write(kept: int, shown: int) -> None:
    """Creates, a student's answers, restores, deletions and summaries lost, in any
    order: after each, the progress is the ``shown`` newest lessons with their counts,
    and the stored summary breaks none of its rules. Small ``kept`` and ``shown`` make
    the trimming and the refills happen. Bounded: 60 examples, 20 s at most."""
    started = time.monotonic()

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(ops)
    # A write behind the others' clocks, with no read between: into a summary that has
    # none yet (lessons from before it), and of a lesson the summary holds, once older
    # ones were trimmed (or deleted).
    @example(
        [Op("create", 0), Op("create", 1), Op("forget", 0, read=False), Op("answer", 0, skew=7)]
    )
    @example(
        [*(Op("create", n, 2, read=False) for n in range(5)), Op("answer", 4, 2, (True,), skew=7)]
    )
    @example([*(Op("create", n, 1) for n in range(4)), Op("delete", 3), Op("create", 0, 3, skew=2)])
    def scripted(script: list[Op]) -> None:
        if time.monotonic() - started > 20:
            return
        store = InMemoryLessonStore(versions_kept=3, progress_kept=kept)

        async def forget() -> None:
            store._progress.pop("kid", None)

        async def summary() -> dict[str, object] | None:
            return store.summary("kid")

        asyncio.run(run(store, "kid", script, forget, shown, summary, kept))

    scripted()
