"""A task's section and its ledger record are written together: a store that fails
between them can no longer leave a section behind its record (``section_disagrees``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from shared.audit import Audit, UserDocuments, audit
from shared.errors import StoreError
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import TaskDocument
from shared.store.base import SectionChange
from shared.store.memory import InMemoryConversationStore, InMemoryTaskDocumentStore
from shared.store.memory import InMemoryTaskLedgerStore as Ledgers
from shared.tasks.sections import TERMINAL
from shared.tools.base import ToolRegistry
from tests.unit.helpers import ALICE, Fakes, Harness, make_service, run_to_end
from tests.unit.test_tasks import Flaky, calls, deliver_all, task_tool


class EndingFails(InMemoryTaskDocumentStore):
    """A section store whose first write of a finished section fails (the store blips
    between the ledger's write and the section's, as a process may die there)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def _trip(self, section: TaskDocument | None) -> None:
        if section is not None and section.status in TERMINAL and self.failures:
            self.failures -= 1
            raise StoreError("Firestore write failed: unavailable")

    async def apply(self, user_id: str, task_id: str, change: SectionChange) -> TaskDocument | None:
        def tripping(section: TaskDocument | None) -> TaskDocument | None:
            updated = change(section)
            self._trip(updated)
            return updated

        return await super().apply(user_id, task_id, tripping)

    def put(self, user_id: str, sections: Mapping[str, TaskDocument]) -> None:
        for section in sections.values():
            self._trip(section)
        super().put(user_id, sections)


async def documents(service: Harness, f: Fakes, conversation_id: str) -> UserDocuments:
    conversation = service.store.document("alice", conversation_id)
    assert conversation is not None
    return UserDocuments(
        "alice",
        (await f.ledger.get("alice")).to_firestore(),
        {conversation_id: conversation},
        {},
        {s.id: s.to_firestore() for s in await f.sections.recent("alice")},
    )


def check(settled: bool) -> Audit:
    return Audit(
        grace=timedelta(seconds=30),
        live_doc_bytes=262_144,
        runs_per_user=3,
        now=datetime.now(UTC),
        settled=settled,
    )


async def test_a_failed_write_leaves_the_section_and_its_record_agreeing() -> None:
    tool = Flaky()
    provider = ScriptedProvider([calls(("make_lesson", "call_1")), Step.reply("Done.")])
    f = Fakes(InMemoryConversationStore(), Ledgers(EndingFails()))
    service = make_service(
        provider, fakes=f, tools=ToolRegistry([task_tool(tool)]), task_lease_seconds=1
    )
    conversation_id, _ = await run_to_end(service, ALICE, "lesson please")
    ((task_id, record),) = (await f.ledger.get("alice")).tasks.items()
    # The tool ran and its result is in; ending the task fails: neither ended.
    with pytest.raises(StoreError):
        await deliver_all(service, f.queue)
    record = (await f.ledger.get("alice")).tasks[task_id]
    section = await f.sections.get("alice", task_id)
    assert section is not None
    assert (record.status, section.status) == ("running", "running")
    assert audit(await documents(service, f, conversation_id), check(settled=False)) == []
    # Cloud Tasks delivers it again once the lease lapses: both end, together.
    await asyncio.sleep(1.1)
    await service.scheduler.sweep("alice")
    await deliver_all(service, f.queue)
    record = (await f.ledger.get("alice")).tasks[task_id]
    section = await f.sections.get("alice", task_id)
    assert section is not None
    assert (record.status, section.status) == ("completed", "completed")
    assert section.summary == "Done."
    assert len(tool.runs) == 1
    assert audit(await documents(service, f, conversation_id), check(settled=True)) == []
