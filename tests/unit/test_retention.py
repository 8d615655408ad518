"""Retention (DESIGN §15): the daily sweep deletes the conversations untouched for
``SPARK_RETENTION_DAYS`` through a user's delete, in pages that continue themselves; a
redelivered page is harmless, and a conversation touched during the sweep is kept."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.agent.conversations.manage import Conversations
from shared.agent.conversations.retention import Retention
from shared.clock import ManualClock
from shared.llm.scripted import ScriptedProvider, Step
from shared.queue.memory import InMemoryTaskQueue
from shared.schemas.documents import ArchiveSegment
from shared.schemas.tasks import TASK_PAYLOAD, RetentionTask
from shared.store.base import Untouched
from shared.store.memory.conversations import InMemoryConversationStore
from shared.voice.speech import cache_path
from tests.unit.helpers import ALICE, BOB, Fakes, Harness, make_service
from tests.unit.test_conversation_manage import with_file

DAYS = 30


async def talk(service: Harness, user: Any = ALICE, text: str = "hello") -> str:
    sent = await service.agent.send(user, text, None)
    assert sent.run is not None
    await sent.run.execute()
    return sent.conversation_id


def harness(replies: int, fakes: Fakes, clock: ManualClock, days: int = DAYS) -> Harness:
    provider = ScriptedProvider([Step.reply(f"Reply {n}.") for n in range(replies)])
    return make_service(provider, clock=clock, fakes=fakes, retention_days=days)


async def deliver(service: Harness, queue: InMemoryTaskQueue, times: int = 1) -> int:
    """Deliver every queued sweep page ``times`` times, until none is left: pages run."""
    pages = 0
    while tasks := [t for t in queue.take() if t.name.startswith("retention-")]:
        for task in tasks:
            for _ in range(times):
                await service.tasks.handle(TASK_PAYLOAD.validate_json(task.body))
                pages += 1
    return pages


async def test_the_sweep_deletes_what_was_untouched_that_long_with_all_kept_of_it() -> None:
    fakes, clock = Fakes(), ManualClock()
    service = harness(3, fakes, clock)
    old = await talk(service)
    bobs = await talk(service, BOB)
    await fakes.files.write("alice/uploads/a.pdf", b"pdf", "application/pdf")
    await fakes.files.write(cache_path("alice", old, "msg_1", "v"), b"mp3", "audio/mpeg")
    await service.store.mutate(
        "alice",
        old,
        lambda c: c.model_copy(
            update={"messages": [*c.messages, with_file("m_f", "alice/uploads/a.pdf")]}
        ),
    )
    segment = ArchiveSegment(
        conversation_id=old,
        segment=1,
        messages=[with_file("m_o", "alice/uploads/a.pdf")],
        created_at=clock.now(),
    )
    await service.store.archive("alice", segment)
    await clock.advance(timedelta(days=DAYS - 1).total_seconds())
    recent = await talk(service)  # a day inside the retention when the sweep runs
    await clock.advance(timedelta(days=1, seconds=1).total_seconds())

    # What Cloud Scheduler sends: no cutoff, the first page.
    await service.tasks.handle(TASK_PAYLOAD.validate_json(b'{"kind": "retention"}'))

    assert service.store.document("alice", old) is None
    assert service.store.document("bob", bobs) is None
    assert await service.store.segments("alice", old) == []
    assert ("alice", old) in service.store.tombstones
    assert fakes.files.paths() == []
    assert service.store.document("alice", recent) is not None
    # One page held them all: the sweep does not continue.
    assert not [t for t in fakes.queue.tasks if t.name.startswith("retention-")]


async def test_retention_off_deletes_nothing() -> None:
    fakes, clock = Fakes(), ManualClock()
    service = harness(1, fakes, clock, days=0)
    cid = await talk(service)
    await clock.advance(timedelta(days=3650).total_seconds())
    await service.tasks.handle(RetentionTask())
    assert service.store.document("alice", cid) is not None


def sweeper(service: Harness, fakes: Fakes, clock: ManualClock, page: int) -> Retention:
    """The sweep on ``service``'s stores, with pages of ``page`` conversations."""
    conversations = Conversations(
        fakes.store, fakes.sections, fakes.files, service.scheduler, clock, fakes.feedback
    )
    return Retention(fakes.store, conversations, fakes.queue, clock, DAYS, page)


@pytest.mark.parametrize("times", [1, 2])
async def test_a_sweep_over_many_pages_continues_itself_and_redelivered_pages_are_harmless(
    times: int,
) -> None:
    fakes, clock = Fakes(), ManualClock()
    service = harness(8, fakes, clock)
    old = [await talk(service, ALICE if n % 2 else BOB, f"old {n}") for n in range(7)]
    await clock.advance(timedelta(days=DAYS + 1).total_seconds())
    recent = await talk(service)
    retention = sweeper(service, fakes, clock, page=3)
    fakes.queue.take()

    first = await retention.sweep(RetentionTask())
    assert (first.deleted, first.kept) == (3, 0)
    assert first.next_page is not None and first.next_page.page == 1
    deleted, pages = first.deleted, 1
    while queued := [t for t in fakes.queue.take() if t.name.startswith("retention-")]:
        for task in queued:
            for _ in range(times):  # a redelivery, or a second chain: nothing twice
                payload = TASK_PAYLOAD.validate_json(task.body)
                assert isinstance(payload, RetentionTask) and payload.cutoff == first_cutoff(clock)
                swept = await retention.sweep(payload)
                deleted += swept.deleted
                pages += 1

    assert deleted == 7
    assert pages <= 3 * times + 1
    for cid in old:
        assert fakes.store.document("alice", cid) is None
        assert fakes.store.document("bob", cid) is None
    assert fakes.store.document("alice", recent) is not None


def first_cutoff(clock: ManualClock) -> datetime:
    return clock.now() - timedelta(days=DAYS)


class TouchedMeanwhile(InMemoryConversationStore):
    """A store on which another process touches ``victim`` at one moment of the sweep:
    right after the sweep's query (``query``), or between the delete's first read and
    its write (``delete``)."""

    def __init__(self, when: str) -> None:
        super().__init__()
        self.when = when
        self.victim: tuple[str, str] | None = None
        self.touched_at: datetime | None = None

    async def _touch(self) -> None:
        assert self.victim is not None and self.touched_at is not None
        at = self.touched_at
        await self.mutate(*self.victim, lambda c: c.model_copy(update={"updated_at": at}))

    async def untouched(self, before: datetime, limit: int) -> list[Untouched]:
        found = await super().untouched(before, limit)
        if self.when == "query":
            await self._touch()
        return found

    async def delete(
        self,
        user_id: str,
        conversation_id: str,
        now: datetime,
        *,
        untouched_before: datetime | None = None,
    ) -> list[str]:
        if self.when == "delete" and (user_id, conversation_id) == self.victim:
            await self._touch()
        return await super().delete(
            user_id, conversation_id, now, untouched_before=untouched_before
        )


@pytest.mark.parametrize("when", ["query", "delete"])
async def test_a_conversation_touched_during_the_sweep_is_kept(when: str) -> None:
    store = TouchedMeanwhile(when)
    fakes, clock = Fakes(store), ManualClock()
    service = harness(2, fakes, clock)
    kept = await talk(service)
    gone = await talk(service, BOB)
    await clock.advance(timedelta(days=DAYS + 1).total_seconds())
    store.victim, store.touched_at = ("alice", kept), clock.now()
    retention = sweeper(service, fakes, clock, page=10)

    swept = await retention.sweep(RetentionTask())

    assert (swept.deleted, swept.kept) == (1, 1)
    assert store.document("alice", kept) is not None
    assert ("alice", kept) not in store.tombstones
    assert store.document("bob", gone) is None
