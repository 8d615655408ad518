"""A person's data over its life (DESIGN §15) as a property, on the in-package fakes
through the real agent (issue 49).

A family (Mum and Dad, parents; Kid, a dependent) uses the product in any order
Hypothesis finds: sends (streamed here, or in the background as a task), lessons
queued as tasks, the queue's tasks delivered one at a time in any order (a task after
its conversation was deleted, an erasure's next page after a send), family messages,
uploads, conversation deletes, account erasures, exports.

After every step:

* no zombie: nothing of a deleted conversation (its document, archive, task sections,
  any file kept under its id) exists again, whatever ran after the delete;
* no orphan: once an erasure has finished, nothing of that uid is left in any store
  but the documented copies (the others' copies of shared conversations, whose
  messages by them say ``author.deleted``; what the others' models were given, kept to
  withhold it) and the ``/deletions`` record, which names nobody;
* an export holds every conversation, lesson and upload the stores hold for its user.
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from collections.abc import AsyncGenerator
from typing import ClassVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shared.auth.accounts import InMemoryAccounts
from shared.auth.base import User
from shared.clock import ManualClock
from shared.errors import SparkError
from shared.families.messages import Target
from shared.llm.base import Finish, ModelEvent, ModelRequest, ProviderName, TextDelta
from shared.llm.base import ToolCallRequest as Call
from shared.queue.base import QueuedTask
from shared.schemas.deletions import deletion_id_of
from shared.schemas.documents import Conversation
from shared.schemas.server import TaskLedger
from shared.schemas.tasks import TASK_PAYLOAD
from shared.store.memory.accounts import InMemoryAccountStore
from tests.unit.helpers import Fakes, Harness, make_service, run_frames
from tests.unit.test_lesson_tools import DRAFT

USERS = {"mum": User(uid="mum", name="Mum"), "dad": User(uid="dad", name="Dad")}
USERS["kid"] = User(uid="kid", name="Kid")
NAMES = sorted(USERS)


class Model:
    """A model that answers at once: told "lesson …", it queues a lesson (a task); the
    lesson drafter is given a lesson; anything else gets a short reply."""

    provider: ClassVar[ProviderName] = "scripted"
    label = "model"

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.calls += 1
        last = request.messages[-1] if request.messages else None
        if "writing a lesson" in request.system:
            yield TextDelta(DRAFT)
            yield Finish("stop")
        elif last is not None and last.role == "user" and last.text.startswith("lesson"):
            brief = {"topic": "Tides", "audience": "Year 5"}
            yield Call(f"l{self.calls}", "create_lesson", json.dumps(brief))
            yield Finish("tool_calls")
        else:
            yield TextDelta("Noted.")
            yield Finish("stop")


def _names(document: object, uid: str) -> bool:
    """Whether ``document`` holds ``uid`` as a value (not inside another string: a
    random id "…dad9…" names nobody)."""
    return f'"{uid}"' in json.dumps(document, default=str)


class DataLifeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.fakes = Fakes(auth=InMemoryAccounts(set(USERS)))
        self.harness: Harness = make_service(Model(), clock=self.clock, fakes=self.fakes)
        self.conversations: dict[str, list[str]] = {u: [] for u in USERS}
        self.deleted: set[tuple[str, str]] = set()
        self.erasing: set[str] = set()  # accounts whose erasure was accepted
        self.pending: list[QueuedTask] = []  # tasks queued and not yet delivered
        self.uploads = 0
        self.run(self._family())

    def run(self, work: object) -> object:
        return self.loop.run_until_complete(work)  # type: ignore[arg-type]

    def teardown(self) -> None:
        self.loop.close()

    async def _family(self) -> None:
        families = self.harness.agent.families
        family = await families.create(USERS["mum"], "The Smiths")
        for uid, role in (("dad", "parent"), ("kid", "dependent")):
            made = await families.invite("mum", family.id, role)  # type: ignore[arg-type]
            await families.join(USERS[uid], made.token)

    @property
    def accounts(self) -> InMemoryAccountStore:
        store = self.harness.deps.tombstones._accounts  # type: ignore[attr-defined]
        assert isinstance(store, InMemoryAccountStore)
        return store

    def _queued(self) -> None:
        """What the queue was given, now pending. A watchdog or a reservation's expiry
        is due long after this machine's steps: left out, as the unit tests do."""
        self.pending += [
            t for t in self.fakes.queue.take() if not t.name.startswith(("watch-", "expire-"))
        ]

    def _conversation(self, uid: str, pick: int) -> str | None:
        """One of ``uid``'s conversations (a deleted one too), or none (a new one)."""
        known = self.conversations[uid]
        return None if pick >= len(known) else known[pick]

    # -- the rules ----------------------------------------------------------------------

    @rule(
        uid=st.sampled_from(NAMES),
        pick=st.integers(0, 3),
        lesson=st.booleans(),
        background=st.booleans(),
    )
    def send(self, uid: str, pick: int, lesson: bool, background: bool) -> None:
        """A message, its reply streamed here or queued as a task; to a new
        conversation, an existing one, or one deleted (refused, making nothing)."""
        conversation_id = self._conversation(uid, pick)
        text = "lesson on tides please" if lesson else "hello there"

        async def send() -> None:
            try:
                if background:
                    sent = await self.harness.agent.send(
                        USERS[uid], text, conversation_id, background=True
                    )
                    made = sent.conversation_id
                else:
                    made, _ = await run_frames(self.harness, USERS[uid], text, conversation_id)
            except SparkError:
                return  # refused (busy, deleted, erased): the invariants say nothing changed
            if made not in self.conversations[uid]:
                self.conversations[uid].append(made)

        self.run(send())
        self._queued()

    @precondition(lambda self: bool(self.pending))
    @rule(pick=st.integers(0, 20))
    def deliver(self, pick: int) -> None:
        """One queued task delivered (a task due later: once its time has come)."""
        task = self.pending.pop(pick % len(self.pending))

        async def deliver() -> None:
            if task.schedule_at is not None and task.schedule_at > self.clock.now():
                await self.clock.advance((task.schedule_at - self.clock.now()).total_seconds())
            await self.harness.handler().handle(TASK_PAYLOAD.validate_json(task.body))

        self.run(deliver())
        self._queued()

    @rule(author=st.sampled_from(NAMES), to=st.sampled_from(["family", *NAMES]))
    def family_message(self, author: str, to: str) -> None:
        target = Target(family=True) if to in ("family", author) else Target(user_id=to)

        async def message() -> None:
            try:
                await self.harness.agent.deliver(author, f"a note from {author}", target)
            except SparkError:
                return

        self.run(message())
        self._queued()

    @rule(uid=st.sampled_from(NAMES))
    def upload(self, uid: str) -> None:
        """A file kept under the user's uploads (as a finished upload leaves it)."""
        if uid in self.erasing:
            return  # an erased account uploads nothing (``start_upload`` refuses)
        self.uploads += 1
        path = f"{uid}/uploads/u{self.uploads}/notes.txt"
        self.run(self.fakes.files.write(path, b"notes", "text/plain"))

    @rule(uid=st.sampled_from(NAMES), pick=st.integers(0, 3))
    def delete_conversation(self, uid: str, pick: int) -> None:
        conversation_id = self._conversation(uid, pick)
        if conversation_id is None:
            return

        async def delete() -> None:
            try:
                await self.harness.agent.delete_conversation(uid, conversation_id)
            except SparkError:
                return
            self.deleted.add((uid, conversation_id))

        self.run(delete())
        self._queued()

    @rule(uid=st.sampled_from(NAMES))
    def erase(self, uid: str) -> None:
        """The account's erasure asked for (Mum, the last parent of a family with
        others, is refused): its pages are tasks, delivered as any other."""

        async def erase() -> None:
            try:
                await self.harness.agent.erase_account(uid)
            except SparkError:
                return
            self.erasing.add(uid)

        self.run(erase())
        self._queued()

    @rule(uid=st.sampled_from(NAMES))
    def export(self, uid: str) -> None:
        """The user's export holds every conversation, lesson and upload the stores
        hold for them (one export per ten minutes: the clock moves on first)."""

        async def export() -> None:
            await self.clock.advance(11 * 60)
            try:
                chunks = [c async for c in await self.harness.agent.export(uid)]
            except SparkError:
                assert uid in self.erasing  # only an erased account is refused
                return
            names = set(zipfile.ZipFile(io.BytesIO(b"".join(chunks))).namelist())
            held = await self._held(uid)
            missing = held - names
            assert not missing, missing

        self.run(export())
        self._queued()

    async def _held(self, uid: str) -> set[str]:
        """The export's names for what the stores hold for ``uid``."""
        conversations = await self.fakes.store.listing(uid, None, 10_000)
        lessons = await self.fakes.lessons.listing(uid, None, 10_000)
        prefix = f"{uid}/uploads/"
        files = [p.removeprefix(prefix) for p in self.fakes.files.paths() if p.startswith(prefix)]
        return (
            {f"conversations/{c}.json" for c in conversations}
            | {f"lessons/{n}.json" for n in lessons}
            | {f"files/{f}" for f in files}
        )

    # -- the invariants -----------------------------------------------------------------

    @invariant()
    def no_zombie(self) -> None:
        async def check() -> None:
            for uid, conversation_id in self.deleted:
                assert self.fakes.store.document(uid, conversation_id) is None
                assert await self.fakes.store.segments(uid, conversation_id) == []
                sections = await self.fakes.sections.recent(uid, 100, conversation_id)
                assert sections == [], (uid, conversation_id)
                kept = [p for p in self.fakes.files.paths() if f"/{conversation_id}/" in p]
                assert kept == [], kept

        self.run(check())

    @invariant()
    def no_orphan(self) -> None:
        async def check() -> None:
            for uid in self.erasing:
                deletion = await self.accounts.deletion(deletion_id_of(uid))
                assert deletion is not None
                if deletion.step != "finished":
                    continue
                assert await self.accounts.listed(uid, 10) == [], uid
                assert [p for p in self.fakes.files.paths() if p.startswith(f"{uid}/")] == []
                assert uid not in self.fakes.auth.user_ids
                assert not _names(deletion.to_firestore(), uid)
                assert self._orphans(uid) == [], (uid, self._orphans(uid))
                for other in set(USERS) - {uid}:
                    for copy in await self._copies(other):
                        for message in copy.messages:
                            if message.author is not None and message.author.user_id == uid:
                                assert message.author.deleted, (other, copy.id, message.id)

        self.run(check())

    async def _copies(self, uid: str) -> list[Conversation]:
        listed = await self.fakes.store.listing(uid, None, 10_000)
        found = [await self.fakes.store.get(uid, c) for c in listed]
        return [c for c in found if c is not None]

    def _orphans(self, uid: str) -> list[str]:
        """Every stored document outside the erased user's own that still names them,
        but the documented ones: the others' copies of shared conversations, and what
        their models were given (provenance: kept to withhold it)."""
        fakes, found = self.fakes, []
        kept = (("client", "conversations"), ("server", "provenance"))
        by_path = {
            **fakes.families.documents,
            **fakes.settings.documents,
            **fakes.provenance.documents,
        }
        for path, document in by_path.items():
            if path[0] == uid or (_names(document, uid) and path[1:3] not in kept):
                found.append("/".join(path))
        for other in set(USERS) - {uid}:
            ledger = TaskLedger.model_validate(fakes.ledger._documents.get(other) or {})
            if _names(ledger.to_firestore(), uid):
                found.append(f"{other}/server")
        return found


DataLifeMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
test_data_over_its_life = DataLifeMachine.TestCase


def test_a_task_delivered_after_its_conversation_was_deleted_makes_nothing_again() -> None:
    """A path the machine must be able to take: a lesson queued, its conversation
    deleted, then the task (and what it queues) delivered."""
    machine = DataLifeMachine()
    try:
        machine.send("mum", 0, lesson=True, background=False)
        assert machine.pending
        machine.delete_conversation("mum", 0)
        while machine.pending:
            machine.deliver(0)
            machine.no_zombie()
        assert machine.deleted
    finally:
        machine.teardown()


def test_an_erasure_interleaved_with_sends_and_exports_leaves_no_orphan() -> None:
    """Dad's erasure, a page at a time, with a send, a family message and an export
    between its pages: at its end nothing of Dad's is left but the documented copies."""
    machine = DataLifeMachine()
    try:
        machine.send("dad", 0, lesson=True, background=True)
        machine.family_message("dad", "family")
        machine.upload("dad")
        machine.erase("dad")
        steps = 0
        while machine.pending:
            machine.deliver(0)
            machine.send("dad", 0, lesson=False, background=False)
            machine.family_message("mum", "dad")
            machine.export("mum")
            machine.no_orphan()
            steps += 1
        deletion = machine.run(machine.accounts.deletion(deletion_id_of("dad")))
        assert deletion is not None and deletion.step == "finished"  # type: ignore[attr-defined]
        assert steps > 1
        machine.no_orphan()
    finally:
        machine.teardown()
