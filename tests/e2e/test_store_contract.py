"""The ``ConversationStore`` contract, held by the in-memory fake and by the Firestore
adapter against the emulator alike."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from google.cloud import firestore
from google.cloud.firestore_v1.document import DocumentReference
from google.cloud.firestore_v1.watch import Watch
from hypothesis import HealthCheck, example, given, settings

from shared.agent.run.runs import new_run, put_message
from shared.errors import (
    ConversationTooLarge,
    ConversationTouched,
    IllegalTransition,
    InviteUsedUp,
    LastParent,
    NotFound,
    RunInProgress,
    StoreError,
    VersionConflict,
)
from shared.export import limit as export_limit
from shared.families import membership
from shared.families.audit import family_violations
from shared.families.membership import Person
from shared.lessons import progress
from shared.schemas.deletions import Deletion, deletion_id_of, uid_hash
from shared.schemas.documents import (
    ArchiveSegment,
    ContentPart,
    Conversation,
    FamilyMirror,
    Lesson,
    Message,
    TaskDocument,
)
from shared.schemas.server import Family, Invite, TaskLedger, TaskRecord
from shared.store.accounts import AccountStore
from shared.store.base import (
    ConversationStore,
    FamilyStore,
    Household,
    LessonStore,
    Reads,
    RunView,
    TaskDocumentStore,
    TaskLedgerStore,
)
from shared.store.firestore import (
    FirestoreConversationStore,
    FirestoreLessonStore,
    FirestoreStores,
    connect,
)
from shared.store.limits import CLOSING_RESERVE, MAX_DOCUMENT_BYTES
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryFamilyStore,
    InMemoryLessonStore,
    InMemoryTaskDocumentStore,
    InMemoryTaskLedgerStore,
)
from shared.store.memory.accounts import accounts_beside
from shared.tasks import sections
from shared.tasks.sections import Step
from tests import lesson_ops
from tests.e2e.conftest import PROJECT
from tests.lesson_ops import Op

pytestmark = pytest.mark.emulator

NOW = datetime(2026, 3, 1, tzinfo=UTC)
# A listener's next snapshot comes in well under a second: this is only a safety net.
WATCH_SECONDS = 60


def message(n: int, text: str = "") -> Message:
    return Message(
        id=f"msg_{n}",
        role="user",
        created_at=NOW,
        status="complete",
        content=[ContentPart.of_text(text or f"message {n}")],
    )


def conversation() -> Conversation:
    return Conversation(
        id=f"conv_{secrets.token_hex(6)}",
        participant_ids=["u"],
        created_at=NOW,
        updated_at=NOW,
        last_message_at=NOW,
        title="A title",
    )


def append(new: Message):  # type: ignore[no-untyped-def]
    return lambda c: c.model_copy(update={"messages": [*c.messages, new]})


@pytest.fixture(params=["memory", "firestore"])
async def store(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[ConversationStore]:
    if request.param == "memory":
        yield InMemoryConversationStore()
        return
    stores = connect(PROJECT)
    yield stores.conversations
    stores.close()


async def test_store_create_get_and_mutate(store: ConversationStore) -> None:
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    assert await store.get(uid, created.id) == created
    assert await store.get("someone-else", created.id) is None
    with pytest.raises(StoreError):
        await store.create(uid, created)
    updated = await store.mutate(uid, created.id, append(message(1)))
    assert [m.id for m in updated.messages] == ["msg_1"]
    # Fields a mutation removes are removed in storage too.
    cleared = await store.mutate(uid, created.id, lambda c: c.model_copy(update={"title": None}))
    assert cleared.title is None
    assert await store.get(uid, created.id) == cleared


async def test_store_mutate_missing_conversation_is_not_found(store: ConversationStore) -> None:
    with pytest.raises(NotFound):
        await store.mutate("nobody", "conv_missing", append(message(1)))


async def test_store_mutation_errors_change_nothing(store: ConversationStore) -> None:
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)

    def refuse(_: Conversation) -> Conversation:
        raise RunInProgress("busy")

    with pytest.raises(RunInProgress):
        await store.mutate(uid, created.id, refuse)
    with pytest.raises(ConversationTooLarge):
        await store.mutate(uid, created.id, append(message(1, "x" * 1_100_000)))
    assert await store.get(uid, created.id) == created


async def test_store_concurrent_appends_all_land(store: ConversationStore) -> None:
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    # Other "processes" (separate Firestore clients) append at the same time as this one.
    connections: list[FirestoreStores] = []
    if isinstance(store, FirestoreConversationStore):
        connections = [connect(PROJECT) for _ in range(2)]
    others: list[ConversationStore] = [c.conversations for c in connections] or [store, store]
    writers = [store, *others]
    await asyncio.gather(
        *(writers[n % 3].mutate(uid, created.id, append(message(n))) for n in range(24))
    )
    stored = await store.get(uid, created.id)
    assert stored is not None
    assert sorted(m.id for m in stored.messages) == sorted(f"msg_{n}" for n in range(24))
    for connection in connections:
        connection.close()


async def test_store_streaming_write_keeps_messages_and_finishing_appends(
    store: ConversationStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    created = conversation().model_copy(update={"messages": [message(n) for n in range(30)]})
    run = new_run("run_1", "msg_reply", NOW, NOW, "msg_29")
    await store.create(uid, created.model_copy(update={"active_run": run}))
    assert run.message is not None
    partial = run.message.model_copy(update={"content": [ContentPart.of_text("Hel")]})

    streamed = await store.mutate(uid, created.id, lambda c: put_message(c, "run_1", partial, NOW))
    finished = partial.model_copy(update={"status": "complete"})
    done = await store.mutate(
        uid,
        created.id,
        lambda c: c.model_copy(update={"messages": [*c.messages, finished], "active_run": None}),
    )

    assert streamed.active_run is not None and streamed.active_run.message == partial
    stored = await store.get(uid, created.id)
    assert stored == done
    assert [m.id for m in stored.messages][-2:] == ["msg_29", "msg_reply"]
    assert stored.messages[-1].text == "Hel" and stored.active_run is None
    if isinstance(store, InMemoryConversationStore):
        # The streaming write sent two fields of activeRun; finishing appended a message.
        assert store.written[created.id][1:] == [
            {"activeRun.message.content"},
            {"messages", "activeRun"},
        ]


async def test_store_probe_reads_the_active_run(store: ConversationStore) -> None:
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    probe = await store.probe(uid, created.id)
    assert (probe.run_id, probe.status) == (None, None)
    run = new_run("run_9", "msg_r", NOW, NOW, None)
    await store.mutate(uid, created.id, lambda c: c.model_copy(update={"active_run": run}))
    probe = await store.probe(uid, created.id)
    assert (probe.run_id, probe.status) == ("run_9", "streaming")
    assert probe.lease_expires_at == NOW  # the lease, so a send can tell a dead run
    assert not probe.live(NOW) and probe.live(NOW - timedelta(minutes=1))
    with pytest.raises(NotFound):
        await store.probe(uid, "conv_missing")


async def test_store_watch_sees_the_current_state_then_each_change(
    store: ConversationStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    seen: list[int] = []
    writes: list[asyncio.Task[Conversation]] = []

    async def later(n: int) -> Conversation:
        await asyncio.sleep(0.05)
        return await store.mutate(uid, created.id, append(message(n)))

    async with contextlib.aclosing(store.watch(uid, created.id)) as snapshots:
        async for snapshot in snapshots:
            assert snapshot is not None
            seen.append(len(snapshot.messages))
            if len(snapshot.messages) == 3:
                break
            writes.append(asyncio.create_task(later(len(snapshot.messages))))
    await asyncio.gather(*writes)
    assert seen == [0, 1, 2, 3]


async def test_store_refuses_only_what_is_current_not_an_old_copy(
    store: ConversationStore,
) -> None:
    """Another instance ended the run this one last saw: a change that refuses while a
    run is active must be judged on the latest document, not on a remembered one."""
    uid = f"u{secrets.token_hex(4)}"
    run = new_run("run_old", "msg_r", NOW, NOW, None)
    created = conversation().model_copy(update={"active_run": run})
    await store.create(uid, created)
    other_connection = connect(PROJECT) if isinstance(store, FirestoreConversationStore) else None
    other = other_connection.conversations if other_connection else store
    await other.mutate(uid, created.id, lambda c: c.model_copy(update={"active_run": None}))

    def needs_idle(c: Conversation) -> Conversation:
        if c.active_run is not None:
            raise RunInProgress("busy")
        return c.model_copy(update={"title": "Idle now"})

    updated = await store.mutate(uid, created.id, needs_idle)
    assert updated.title == "Idle now" and updated.active_run is None
    if other_connection is not None:
        other_connection.close()


async def test_store_apply_returns_the_decision_of_the_attempt_that_landed(
    store: ConversationStore,
) -> None:
    """A change that decides something may run more than once (on Firestore, first on
    the copy this instance remembers, which another instance has changed since): the
    decision returned is the one made on the version written over, never an earlier one;
    for a change that writes nothing, the one made on a fresh read."""
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    await store.mutate(uid, created.id, append(message(1)))  # remembered here
    other_connection = connect(PROJECT) if isinstance(store, FirestoreConversationStore) else None
    other = other_connection.conversations if other_connection else store
    await other.mutate(uid, created.id, append(message(2)))
    seen: list[int] = []

    def count_and_append(c: Conversation) -> tuple[Conversation, int]:
        seen.append(len(c.messages))
        return append(message(3))(c), len(c.messages)

    updated, counted = await store.apply(uid, created.id, count_and_append)
    assert counted == 2
    assert [m.id for m in updated.messages] == ["msg_1", "msg_2", "msg_3"]
    await other.mutate(uid, created.id, append(message(4)))
    unchanged, counted = await store.apply(uid, created.id, lambda c: (c, len(c.messages)))
    assert counted == 4 and len(unchanged.messages) == 4
    if other_connection is not None:
        assert seen == [1, 2]  # first on the out-of-date copy: that write lost
        other_connection.close()


@pytest.fixture(params=["memory", "firestore"])
async def ledgers(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[tuple[TaskLedgerStore, TaskLedgerStore]]:
    """A ledger store, and another instance's (the same store for the fake)."""
    if request.param == "memory":
        ledger = InMemoryTaskLedgerStore()
        yield ledger, ledger
        return
    first, second = connect(PROJECT), connect(PROJECT)
    yield first.ledgers, second.ledgers
    first.close()
    second.close()


def bump(ledger: TaskLedger) -> TaskLedger:
    return ledger.model_copy(update={"next_seq": ledger.next_seq + 1})


async def test_ledger_store_apply_returns_the_decision_of_the_attempt_that_landed(
    ledgers: tuple[TaskLedgerStore, TaskLedgerStore],
) -> None:
    store, other = ledgers
    uid = f"u{secrets.token_hex(4)}"
    await store.mutate(uid, bump)  # remembered here
    await other.mutate(uid, bump)
    seen: list[int] = []

    def count_and_bump(ledger: TaskLedger) -> tuple[TaskLedger, int]:
        seen.append(ledger.next_seq)
        return bump(ledger), ledger.next_seq

    updated, counted = await store.apply(uid, count_and_bump)
    assert (counted, updated.next_seq) == (2, 3)
    await other.mutate(uid, bump)
    unchanged, counted = await store.apply(uid, lambda led: (led, led.next_seq))
    assert counted == unchanged.next_seq == 4
    if store is not other:
        assert seen == [1, 2]  # first on the out-of-date copy: that write lost


async def test_ledger_store_starts_one_export_between_two_processes(
    ledgers: tuple[TaskLedgerStore, TaskLedgerStore],
) -> None:
    """The export's limit is the ledger's compare-and-set: two instances claiming at
    once, one claim lands and the other is refused, on the store's verdict."""
    store, other = ledgers
    uid = f"u{secrets.token_hex(4)}"
    await store.mutate(uid, bump)  # each instance remembers a version of its own
    await other.get(uid)
    claims = await asyncio.gather(
        store.mutate(uid, lambda led: export_limit.claim(led, NOW)),
        other.mutate(uid, lambda led: export_limit.claim(led, NOW)),
        return_exceptions=True,
    )
    assert sorted(type(c).__name__ for c in claims) == ["RateLimited", "TaskLedger"]
    assert (await store.get(uid)).exported_at == NOW
    later = NOW + export_limit.EVERY
    claimed = await other.mutate(uid, lambda led: export_limit.claim(led, later))
    assert claimed.exported_at == later


async def _until(snapshots: AsyncIterator[RunView | None], count: int) -> RunView:
    """Read versions until one has ``count`` messages (intermediate ones may be skipped)."""
    while True:
        snapshot = await asyncio.wait_for(anext(snapshots), WATCH_SECONDS)
        assert snapshot is not None
        if len(snapshot.messages) == count:
            return snapshot


async def test_store_two_watchers_share_the_conversation_and_one_may_leave(
    store: ConversationStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    run = new_run("run_1", "msg_r", NOW, NOW, "msg_0")
    created = conversation().model_copy(update={"active_run": run})
    await store.create(uid, created)
    first, second = store.watch(uid, created.id), store.watch(uid, created.id)
    for watcher in (first, second):
        now = await _until(watcher, 0)
        assert now.active_run is not None and now.active_run.run_id == "run_1"
    listeners = store.listeners  # type: ignore[attr-defined]
    assert len(listeners) == 1  # one listener for both

    await store.mutate(uid, created.id, append(message(1)))
    for watcher in (first, second):
        assert (await _until(watcher, 1)).messages[-1].id == "msg_1"
    await first.aclose()
    assert len(listeners) == 1  # the other still watches
    await store.mutate(uid, created.id, append(message(2)))
    latest = await _until(second, 2)
    assert [m.id for m in latest.messages] == ["msg_1", "msg_2"]
    await second.aclose()
    assert len(listeners) == 0

    # Watching again after everyone left starts from the current state.
    async with contextlib.aclosing(store.watch(uid, created.id)) as third:
        assert [m.id for m in (await _until(third, 2)).messages] == ["msg_1", "msg_2"]


async def test_store_listener_that_ends_by_itself_fails_its_followers(
    emulators: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Firestore ends a listener on an error it will not recover from (here its stream
    is cancelled under it): the store notices, its followers fail with ``StoreError``
    (so a resume stream ends and the client reconnects), and the next follower starts a
    new listener. Only the Firestore adapter has listeners of its own."""
    watches: list[Watch] = []
    real = DocumentReference.on_snapshot

    def recorded(self: DocumentReference, callback: Any) -> Watch:
        watch = real(self, callback)
        watches.append(watch)
        return watch

    monkeypatch.setattr(DocumentReference, "on_snapshot", recorded)
    stores = connect(PROJECT)
    store = stores.conversations
    store.listeners._check_seconds = 0.2  # instead of every 5 s
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    try:
        async with contextlib.aclosing(store.watch(uid, created.id)) as first:
            assert await asyncio.wait_for(anext(first), WATCH_SECONDS) is not None
            assert watches[0].is_active
            rpc = watches[0]._rpc
            assert rpc is not None
            rpc.close()  # the stream ends; the SDK closes the listener on its own thread
            with pytest.raises(StoreError, match="reconnect"):
                await asyncio.wait_for(anext(first), WATCH_SECONDS)
        async with contextlib.aclosing(store.watch(uid, created.id)) as second:
            assert await asyncio.wait_for(anext(second), WATCH_SECONDS) is not None
        assert len(watches) == 2
    finally:
        stores.close()


async def test_store_watch_of_a_missing_conversation_says_none(store: ConversationStore) -> None:
    async with contextlib.aclosing(store.watch("nobody", "conv_missing")) as snapshots:
        first = await asyncio.wait_for(anext(snapshots), WATCH_SECONDS)
    assert first is None


async def test_store_concurrent_streaming_writes_all_land(store: ConversationStore) -> None:
    """Streaming writes (batched together on Firestore) keep their own preconditions:
    concurrent read-modify-writes of the in-flight message from several instances all
    land, none overwriting another."""
    uid = f"u{secrets.token_hex(4)}"
    run = new_run("run_1", "msg_r", NOW, NOW, None)
    created = conversation().model_copy(update={"active_run": run})
    await store.create(uid, created)
    connections: list[FirestoreStores] = []
    if isinstance(store, FirestoreConversationStore):
        connections = [connect(PROJECT) for _ in range(2)]
    writers = [store, *(c.conversations for c in connections)]

    def add(n: int):  # type: ignore[no-untyped-def]
        def change(c: Conversation) -> Conversation:
            assert c.active_run is not None and c.active_run.message is not None
            message = c.active_run.message
            content = [*message.content, ContentPart.of_text(f"part {n}")]
            return put_message(c, "run_1", message.model_copy(update={"content": content}), NOW)

        return change

    await asyncio.gather(
        *(writers[n % len(writers)].mutate(uid, created.id, add(n)) for n in range(18))
    )
    stored = await store.get(uid, created.id)
    assert stored is not None and stored.active_run is not None
    assert stored.active_run.message is not None
    texts = sorted(p.text or "" for p in stored.active_run.message.content)
    assert texts == sorted(f"part {n}" for n in range(18))
    for connection in connections:
        connection.close()


async def test_store_lists_a_users_conversations_a_page_at_a_time(
    store: ConversationStore,
) -> None:
    uid, other = f"u{secrets.token_hex(4)}", f"u{secrets.token_hex(4)}"
    for n in (3, 0, 4, 1, 2):
        await store.create(uid, conversation().model_copy(update={"id": f"conv_{n}"}))
    await store.create(other, conversation().model_copy(update={"id": "conv_9"}))
    assert await store.listing(uid, None, 2) == ["conv_0", "conv_1"]
    assert await store.listing(uid, "conv_1", 2) == ["conv_2", "conv_3"]
    assert await store.listing(uid, "conv_3", 2) == ["conv_4"]
    assert await store.listing(uid, "conv_4", 2) == []
    assert await store.listing(f"u{secrets.token_hex(4)}", None, 2) == []


async def test_store_reserved_ids_are_simply_not_found(store: ConversationStore) -> None:
    assert await store.get("someone", "__x__") is None
    with pytest.raises(NotFound):
        await store.mutate("someone", "__x__", append(message(1)))
    with pytest.raises(NotFound):
        await store.probe("someone", "__x__")


async def test_store_measures_size_as_firestore_does(store: ConversationStore) -> None:
    """Non-ASCII text counts its UTF-8 bytes: 1 MB of 'é' (2 bytes each) is 1 MB, not the
    6 MB a JSON-escaped estimate would say; past Firestore's limit is refused cleanly."""
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    fits = await store.mutate(uid, created.id, append(message(1, "é" * 495_000)))
    assert len(fits.messages) == 1
    with pytest.raises(ConversationTooLarge):
        await store.mutate(uid, created.id, append(message(2, "é" * 30_000)))
    stored = await store.get(uid, created.id)
    assert stored is not None and len(stored.messages) == 1


async def test_store_keeps_room_under_the_limit_for_writes_that_close(
    store: ConversationStore,
) -> None:
    """New content (``reserve``) stops short of the limit by ``CLOSING_RESERVE``; a
    write that closes something may use that room; one that makes the document no
    larger is never refused for it."""
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    size = store.size(uid, created.id)
    assert size is not None
    line = MAX_DOCUMENT_BYTES - CLOSING_RESERVE
    await store.mutate(
        uid, created.id, append(message(1, "x" * (line - size - 500))), CLOSING_RESERVE
    )
    with pytest.raises(ConversationTooLarge):
        await store.mutate(uid, created.id, append(message(2, "y" * 1000)), CLOSING_RESERVE)
    stored = await store.get(uid, created.id)
    assert stored is not None and len(stored.messages) == 1
    closing = await store.mutate(uid, created.id, append(message(2, "y" * 1000)))
    assert len(closing.messages) == 2
    shorter = await store.mutate(
        uid, created.id, lambda c: c.model_copy(update={"title": "A"}), CLOSING_RESERVE
    )
    assert shorter.title == "A"
    # A new conversation is new content too.
    with pytest.raises(ConversationTooLarge):
        await store.create(
            uid, conversation().model_copy(update={"messages": [message(3, "z" * line)]})
        )


async def test_store_archive_segments_are_rewritable_and_read_in_order(
    store: ConversationStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    created = conversation()
    await store.create(uid, created)
    for number in (2, 1, 2):  # out of order, and segment 2 written twice (a redone move)
        segment = ArchiveSegment(
            conversation_id=created.id,
            segment=number,
            messages=[message(number * 10 + k) for k in range(3)],
            created_at=NOW,
        )
        await store.archive(uid, segment)
    segments = await store.segments(uid, created.id)
    assert [s.segment for s in segments] == [1, 2]
    assert [m.id for m in segments[1].messages] == ["msg_20", "msg_21", "msg_22"]


def with_files(n: int, paths: list[str]) -> Message:
    """A message carrying a file at each of ``paths`` (a PDF's text beside the last)."""
    files = [
        ContentPart.model_validate(
            {
                "type": "file",
                "file": {
                    "storagePath": path,
                    "contentType": "application/pdf",
                    "sizeBytes": 10,
                    **({"textPath": path + ".txt"} if i == len(paths) - 1 else {}),
                },
            }
        )
        for i, path in enumerate(paths)
    ]
    return message(n).model_copy(update={"content": [*message(n).content, *files]})


async def test_store_archive_indexes_the_files_its_segments_name(
    store: ConversationStore,
) -> None:
    """Issue 34: a file lookup found its segment by reading every one. Each segment
    written indexes the paths its messages name (a PDF's text too); a segment rewritten
    (a move redone) or written again adds nothing twice; 600 files (more than one batch
    holds) are all indexed."""
    uid = f"u{secrets.token_hex(4)}"
    cid = "dm_" + secrets.token_hex(4)
    await store.create(uid, conversation().model_copy(update={"id": cid}))
    one = ArchiveSegment(
        conversation_id=cid,
        segment=1,
        messages=[with_files(1, ["u/a.png", "u/b.pdf"]), message(2)],
        created_at=NOW,
    )
    two = ArchiveSegment(
        conversation_id=cid, segment=2, messages=[with_files(3, ["u/a.png"])], created_at=NOW
    )
    for segment in (one, two, one):
        await store.archive(uid, segment)
    assert sorted(await store.archived_file(uid, cid, "u/a.png")) == [1, 2]
    assert await store.archived_file(uid, cid, "u/b.pdf") == [1]
    assert await store.archived_file(uid, cid, "u/b.pdf.txt") == [1]
    assert await store.archived_file(uid, cid, "u/nothing.png") == []
    assert await store.archived_file(uid, "dm_other", "u/a.png") == []
    assert await store.archived_file("someone-else", cid, "u/a.png") == []
    found = await store.segment(uid, cid, 2)
    assert found is not None and found.to_firestore() == two.to_firestore()
    assert await store.segment(uid, cid, 3) is None
    many = [f"u/{n}.png" for n in range(600)]
    big = ArchiveSegment(
        conversation_id=cid,
        segment=3,
        messages=[with_files(10 + n, many[n : n + 10]) for n in range(0, 600, 10)],
        created_at=NOW,
    )
    await store.archive(uid, big)
    assert await store.archived_file(uid, cid, "u/599.png") == [3]
    assert await store.archived_file(uid, cid, "u/0.png") == [3]
    # ``index`` alone (segments archived before the index existed) adds the same.
    await store.index(uid, two.model_copy(update={"segment": 4}))
    assert sorted(await store.archived_file(uid, cid, "u/a.png")) == [1, 2, 4]


async def test_store_delete_leaves_nothing_and_again_finds_what_is_left(
    store: ConversationStore,
) -> None:
    """A delete takes the document, its segments and their file index, and names every
    file they held; a second delete is no error (its tombstone), while an id that never
    named a conversation is not found."""
    uid = f"u{secrets.token_hex(4)}"
    created = conversation().model_copy(update={"messages": [with_files(1, ["u/live.png"])]})
    await store.create(uid, created)
    old = ArchiveSegment(
        conversation_id=created.id,
        segment=1,
        messages=[with_files(2, ["u/old.pdf"])],
        created_at=NOW,
    )
    await store.archive(uid, old)
    files = await store.delete(uid, created.id, NOW)
    assert sorted(files) == ["u/live.png", "u/live.png.txt", "u/old.pdf", "u/old.pdf.txt"]
    assert await store.get(uid, created.id) is None
    assert await store.segments(uid, created.id) == []
    assert await store.archived_file(uid, created.id, "u/old.pdf") == []
    assert await store.delete(uid, created.id, NOW) == []
    with pytest.raises(NotFound):
        await store.delete(uid, "conv_never", NOW)
    with pytest.raises(NotFound):
        await store.delete("someone-else", created.id, NOW)


async def test_store_a_write_after_a_delete_recreates_nothing(store: ConversationStore) -> None:
    """No zombie writes (DESIGN §15): every write that comes after a delete, from a
    process that remembers the document (a run's streaming write, its closing write, a
    task's result) or one that never read it, and a roll-over's segment and index, is
    refused; nothing of the conversation is made again."""
    uid = f"u{secrets.token_hex(4)}"
    run = new_run("run_1", "msg_r", NOW, NOW, None)
    created = conversation().model_copy(update={"active_run": run})
    await store.create(uid, created)
    others: list[FirestoreStores] = []
    if isinstance(store, FirestoreConversationStore):
        others = [connect(PROJECT)]
    other = others[0].conversations if others else store
    await other.get(uid, created.id)  # another process remembers it too
    assert run.message is not None
    partial = run.message.model_copy(update={"content": [ContentPart.of_text("Hel")]})
    streamed = await store.mutate(uid, created.id, lambda c: put_message(c, "run_1", partial, NOW))
    assert streamed.active_run is not None

    await store.delete(uid, created.id, NOW)

    more = partial.model_copy(update={"content": [ContentPart.of_text("Hello")]})
    done = more.model_copy(update={"status": "complete"})
    writes = [
        lambda s: s.mutate(uid, created.id, lambda c: put_message(c, "run_1", more, NOW)),
        lambda s: s.mutate(
            uid,
            created.id,
            lambda c: c.model_copy(update={"messages": [*c.messages, done], "active_run": None}),
        ),
        lambda s: s.mutate(uid, created.id, lambda c: c.model_copy(update={"title": "Back"})),
    ]
    for writer in (store, other):
        for write in writes:
            with pytest.raises(NotFound):
                await write(writer)
    segment = ArchiveSegment(
        conversation_id=created.id,
        segment=1,
        messages=[with_files(1, ["u/a.png"])],
        created_at=NOW,
    )
    for writer in (store, other):
        with pytest.raises(NotFound):
            await writer.archive(uid, segment)
        with pytest.raises(NotFound):
            await writer.index(uid, segment)
    assert await store.get(uid, created.id) is None
    assert await store.segments(uid, created.id) == []
    assert await store.archived_file(uid, created.id, "u/a.png") == []
    for connection in others:
        connection.close()


@pytest.fixture(params=["memory", "firestore"])
async def lessons(request: pytest.FixtureRequest, emulators: object) -> AsyncIterator[LessonStore]:
    if request.param == "memory":
        yield InMemoryLessonStore()
        return
    stores = connect(PROJECT)
    yield stores.lessons
    stores.close()


def lesson(version: int, body: str = "<lesson/>") -> Lesson:
    return Lesson(
        id="les_1", title="Tides", body=body, version=version, created_at=NOW, updated_at=NOW
    )


async def test_lesson_store_replaces_only_the_version_it_was_given(lessons: LessonStore) -> None:
    uid = f"u{secrets.token_hex(4)}"
    assert await lessons.create(uid, lesson(1)) == lesson(1)
    assert await lessons.create(uid, lesson(1, "<lesson><p>x</p></lesson>")) == lesson(1)
    assert await lessons.get("someone-else", "les_1") is None
    two = lesson(2, "<lesson><h1>Tides</h1></lesson>")
    assert await lessons.replace(uid, two, 1) == two
    with pytest.raises(VersionConflict) as stale:
        await lessons.replace(uid, lesson(2, "<lesson><p>lost?</p></lesson>"), 1)
    assert stale.value.current == 2
    assert await lessons.get(uid, "les_1") == two
    with pytest.raises(NotFound):
        await lessons.replace("someone-else", lesson(2), 1)


async def test_lesson_store_concurrent_replaces_of_one_version_write_one(
    lessons: LessonStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    await lessons.create(uid, lesson(1))
    bodies = [f"<lesson><p>{n}</p></lesson>" for n in range(5)]
    outcomes = await asyncio.gather(
        *(lessons.replace(uid, lesson(2, body), 1) for body in bodies), return_exceptions=True
    )
    written = [o for o in outcomes if isinstance(o, Lesson)]
    assert len(written) == 1
    assert all(isinstance(o, VersionConflict) for o in outcomes if not isinstance(o, Lesson))
    assert await lessons.get(uid, "les_1") == written[0]


@pytest.fixture(params=["memory", "firestore"])
async def keeping_three(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[LessonStore]:
    """A lesson store that keeps the last three versions of each lesson."""
    if request.param == "memory":
        yield InMemoryLessonStore(versions_kept=3)
        return
    stores = connect(PROJECT, lesson_versions_kept=3)
    yield stores.lessons
    stores.close()


def numbered(version: int) -> Lesson:
    return lesson(version, f"<lesson><p>{'v' * version}</p></lesson>").model_copy(
        update={"title": f"Tides {version}"}
    )


async def test_lesson_store_keeps_each_version_it_replaces_and_drops_the_oldest(
    keeping_three: LessonStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    await keeping_three.create(uid, numbered(1))
    for version in range(2, 7):
        await keeping_three.replace(uid, numbered(version), version - 1)

    listed = await keeping_three.versions(uid, "les_1")
    assert [(k.version, k.title) for k in listed] == [
        (5, "Tides 5"),
        (4, "Tides 4"),
        (3, "Tides 3"),
    ]
    assert [k.characters for k in listed] == [len(numbered(v).body) for v in (5, 4, 3)]
    assert listed[0].saved_at == NOW
    kept = await keeping_three.version(uid, "les_1", 5)
    assert kept is not None and kept.as_lesson() == numbered(5)
    assert await keeping_three.version(uid, "les_1", 2) is None  # pushed out
    assert await keeping_three.version(uid, "les_1", 6) is None  # the lesson itself
    assert await keeping_three.versions("someone-else", "les_1") == []
    with pytest.raises(ValueError, match="cannot replace"):
        await keeping_three.replace(uid, numbered(8), 6)


async def test_lesson_store_a_refused_change_keeps_nothing_and_a_race_keeps_one(
    lessons: LessonStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    await lessons.create(uid, lesson(1))
    outcomes = await asyncio.gather(
        *(lessons.replace(uid, lesson(2, f"<lesson><p>{n}</p></lesson>"), 1) for n in range(5)),
        return_exceptions=True,
    )
    assert sum(isinstance(o, Lesson) for o in outcomes) == 1
    with pytest.raises(VersionConflict):
        await lessons.replace(uid, lesson(2), 1)
    assert [k.version for k in await lessons.versions(uid, "les_1")] == [1]
    kept = await lessons.version(uid, "les_1", 1)
    assert kept is not None and kept.as_lesson() == lesson(1)


async def test_lesson_store_lists_a_users_lessons_a_page_at_a_time(lessons: LessonStore) -> None:
    uid = f"u{secrets.token_hex(4)}"
    for n in (2, 0, 1):
        await lessons.create(uid, lesson(1).model_copy(update={"id": f"les_{n}"}))
    await lessons.create(f"other-{uid}", lesson(1).model_copy(update={"id": "les_9"}))
    assert await lessons.listing(uid, None, 2) == ["les_0", "les_1"]
    assert await lessons.listing(uid, "les_1", 2) == ["les_2"]
    assert await lessons.delete(uid, "les_1")
    assert await lessons.listing(uid, None, 5) == ["les_0", "les_2"]


async def test_lesson_store_delete_keeps_the_lesson_as_its_last_version(
    keeping_three: LessonStore,
) -> None:
    uid = f"u{secrets.token_hex(4)}"
    await keeping_three.create(uid, numbered(1))
    await keeping_three.replace(uid, numbered(2), 1)
    assert await keeping_three.delete(uid, "les_1") is True
    assert await keeping_three.delete(uid, "les_1") is False

    assert await keeping_three.get(uid, "les_1") is None
    assert [k.version for k in await keeping_three.versions(uid, "les_1")] == [2, 1]
    kept = await keeping_three.version(uid, "les_1", 2)
    assert kept is not None and kept.as_lesson() == numbered(2)


async def test_lesson_store_delete_racing_a_save_deletes_whichever_lands_first(
    keeping_three: LessonStore,
) -> None:
    """A save landing between the delete's read and its write must not turn the delete
    into a silent no-op: either the save wins and is deleted after it, or the delete wins
    and the save is refused. Either way the lesson is gone and the delete said so."""
    uid = f"u{secrets.token_hex(4)}"
    for n in range(8):
        lesson_id = f"les_{n}"
        first = numbered(1).model_copy(update={"id": lesson_id})
        await keeping_three.create(uid, first)
        second = numbered(2).model_copy(update={"id": lesson_id})
        deleted, _ = await asyncio.gather(
            keeping_three.delete(uid, lesson_id),
            keeping_three.replace(uid, second, 1),
            return_exceptions=True,
        )
        assert deleted is True
        assert await keeping_three.get(uid, lesson_id) is None


# -- the progress summary, written with every lesson change (issue 34) ---------------------


@dataclass
class Progressing:
    """A lesson store that keeps ``kept`` lessons in each summary, and, for a user, what
    forgets their summary (as before summaries existed) and reads it as stored."""

    store: LessonStore
    kept: int
    forget: Callable[[str], Awaitable[None]]
    summary: Callable[[str], Awaitable[dict[str, Any] | None]]


@contextlib.asynccontextmanager
async def progressing_on(kind: str) -> AsyncIterator[Progressing]:
    """The store of ``kind`` (a Firestore client is bound to the loop it was made in)."""
    kept = 4
    if kind == "memory":
        memory = InMemoryLessonStore(versions_kept=3, progress_kept=kept)

        async def forget_memory(uid: str) -> None:
            memory._progress.pop(uid, None)

        async def summary_memory(uid: str) -> dict[str, Any] | None:
            return memory.summary(uid)

        yield Progressing(memory, kept, forget_memory, summary_memory)
        return
    stores = connect(PROJECT)
    store = FirestoreLessonStore(stores.client, versions_kept=3, progress_kept=kept)

    async def forget(uid: str) -> None:
        await stores.client.document(uid, "server", "progress", "lessons").delete()

    async def summary(uid: str) -> dict[str, Any] | None:
        snapshot = await stores.client.document(uid, "server", "progress", "lessons").get()
        return snapshot.to_dict() if snapshot.exists else None

    try:
        yield Progressing(store, kept, forget, summary)
    finally:
        stores.close()


@pytest.fixture(params=["memory", "firestore"])
async def progressing(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[Progressing]:
    async with progressing_on(request.param) as made:
        yield made


@pytest.mark.parametrize("kind", ["memory", "firestore"])
def test_lesson_store_progress_matches_the_lessons_after_every_kind_of_write(
    kind: str, emulators: object
) -> None:
    """Creates, a student's answers, restores, deletions, a write behind the others'
    clocks and summaries lost (lessons from before them), in random orders: after each
    step the stored summary breaks none of its rules, and the progress is the lessons'
    (``tests/lesson_ops.py``). Bounded by its examples (8, and the two written out), not
    by time: a time budget ran fewer of them on a slower machine."""

    async def scripted_on(script: list[Op]) -> None:
        uid = f"u{secrets.token_hex(4)}"
        async with progressing_on(kind) as p:

            async def forget() -> None:
                await p.forget(uid)

            async def summary() -> dict[str, Any] | None:
                return await p.summary(uid)

            await lesson_ops.run(p.store, uid, script, forget, 3, summary, p.kept)

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(lesson_ops.ops)
    @example([*(Op("create", n, 2, read=False) for n in range(6)), Op("answer", 5, 2, skew=7)])
    @example([Op("create", 0), Op("create", 1), Op("forget", 0, read=False), Op("answer", 0)])
    def scripted(script: list[Op]) -> None:
        asyncio.run(scripted_on(script))

    scripted()


async def test_lesson_store_concurrent_writes_of_one_user_all_reach_the_summary(
    progressing: Progressing,
) -> None:
    """Six lessons of one user written at once (each batch's summary precondition fails
    but for one, and the others are made again on fresh reads), then answered at once:
    the summary holds the newest four, each as its lesson says."""
    uid = f"u{secrets.token_hex(4)}"
    made = [
        Lesson(
            id=f"les_{n}",
            title=f"L{n}",
            body=lesson_ops.body(2, (False,), f"L{n}"),
            version=1,
            created_at=NOW,
            updated_at=NOW + timedelta(seconds=n),
        )
        for n in range(6)
    ]
    await asyncio.gather(*(progressing.store.create(uid, m) for m in made))
    answered = [
        m.model_copy(
            update={
                "body": lesson_ops.body(2, (True,), m.title),
                "version": 2,
                "updated_at": m.updated_at + timedelta(minutes=1),
            }
        )
        for m in made
    ]
    await asyncio.gather(*(progressing.store.replace(uid, a, 1) for a in answered))
    stored = await progressing.summary(uid)
    everything = await progressing.store.recent(uid, 100)
    assert progress.violations(stored, everything, progressing.kept) == []
    assert stored is not None
    assert sorted(stored["lessons"]) == ["les_2", "les_3", "les_4", "les_5"]
    assert {c["answered"] for c in stored["lessons"].values()} == {2}
    assert stored["complete"] is False


async def test_lesson_store_a_refill_racing_writes_never_hides_one(
    progressing: Progressing,
) -> None:
    """A summary rebuilt from the lessons (none stored yet) while lessons are written:
    it lands only over the version it read, so no write it did not see is lost."""
    uid = f"u{secrets.token_hex(4)}"
    for n in range(3):
        made = Lesson(
            id=f"les_{n}",
            title=f"L{n}",
            body=lesson_ops.body(n, (), f"L{n}"),
            version=1,
            created_at=NOW,
            updated_at=NOW + timedelta(seconds=n),
        )
        await progressing.store.create(uid, made)
    first = await progressing.summary(uid)
    assert first is not None and first["complete"] is True  # a new user's: nothing else
    for round_ in range(4):
        await progressing.forget(uid)
        current = await progressing.store.get(uid, "les_0")
        assert current is not None
        edited = current.model_copy(
            update={
                "body": lesson_ops.body(3, (True,), current.title),
                "version": current.version + 1,
                "updated_at": NOW + timedelta(minutes=round_ + 1),
            }
        )
        await asyncio.gather(
            progressing.store.refill(uid), progressing.store.replace(uid, edited, current.version)
        )
        everything = await progressing.store.recent(uid, 100)
        stored = await progressing.summary(uid)
        assert progress.violations(stored, everything, progressing.kept) == [], round_


# -- FamilyStore ---------------------------------------------------------------------------


@dataclass
class FamilyStores:
    """A family store and four more instances of it (other processes on Firestore: each
    its own client; the same store for the fake), and a reader of raw documents."""

    store: FamilyStore
    others: list[FamilyStore]
    raw: Callable[[tuple[str, ...]], dict[str, Any] | None]


@pytest.fixture(params=["memory", "firestore"])
async def families(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[FamilyStores]:
    if request.param == "memory":
        memory = InMemoryFamilyStore()
        yield FamilyStores(memory, [memory] * 4, lambda path: memory.documents.get(path))
        return
    connections = [connect(PROJECT) for _ in range(5)]
    sync = firestore.Client(project=PROJECT)

    def raw(path: tuple[str, ...]) -> dict[str, Any] | None:
        return sync.document(*path).get().to_dict()

    yield FamilyStores(connections[0].families, [c.families for c in connections[1:]], raw)
    for connection in connections:
        connection.close()
    sync.close()


def person(name: str) -> Person:
    return Person(f"{name}-{secrets.token_hex(4)}", name.title())


async def founded(store: FamilyStore, parent: Person) -> Family:
    family_id = f"fam_{secrets.token_hex(6)}"
    change = partial(membership.create, family_id=family_id, name="Tides", creator=parent, now=NOW)
    _, family = await store.apply(Reads(family_id=family_id, users=(parent.user_id,)), change)
    return family


async def invited(store: FamilyStore, family: Family, parent: Person, uses: int) -> str:
    """A new invite's token hash (the token itself plays no part in the store)."""
    hashed = secrets.token_hex(32)
    invite = Invite(
        id=f"inv_{secrets.token_hex(4)}",
        family_id=family.id,
        role="dependent",
        max_uses=uses,
        expires_at=NOW + timedelta(hours=1),
        created_at=NOW,
        created_by=parent.user_id,
        token_hash=hashed,
    )
    change = partial(membership.add_invite, caller=parent.user_id, invite=invite, now=NOW)
    await store.apply(Reads(family_id=family.id, all_invites=True), change)
    return hashed


async def test_family_store_writes_the_family_its_mirrors_and_memberships_together(
    families: FamilyStores,
) -> None:
    store, raw = families.store, families.raw
    parent, child = person("mum"), person("sam")
    family = await founded(store, parent)
    hashed = await invited(store, family, parent, uses=2)
    found = await store.read(Reads(token_hash=hashed, users=(child.user_id,)))
    (invite,) = found.invites.values()
    assert found.family == family.model_copy(update={"invite_ids": [invite.id]})
    assert raw(("inviteTokens", hashed)) == {"familyId": family.id, "inviteId": invite.id}
    change = partial(membership.join, person=child, now=NOW, max_members=10)
    written, joined = await store.apply(Reads(token_hash=hashed, users=(child.user_id,)), change)
    assert written.family == joined
    again = await store.read(
        Reads(family_id=family.id, invite_id=invite.id, users=(child.user_id,))
    )
    assert again.family == joined and again.invites[invite.id].uses == 1
    assert again.memberships[child.user_id].family_id == family.id
    for member in (parent, child):
        mirror = raw((member.user_id, "client", "family", "current"))
        assert mirror is not None
        assert FamilyMirror.model_validate(mirror) == joined.mirror_for(member.user_id)
    # Reading something that does not exist is an empty household.
    nothing = await store.read(Reads(token_hash="0" * 64, users=("nobody",)))
    assert nothing.family is None and not nothing.invites
    assert nothing.memberships["nobody"].family_id is None


async def test_family_store_reserved_ids_name_nothing(families: FamilyStores) -> None:
    """Firestore reserves ids of the form ``__x__`` (a path with one is an error): the
    family store reads one as nothing, as the conversation and lesson stores do."""
    store = families.store
    parent = person("mum")
    family = await founded(store, parent)
    for reads in (
        Reads(family_id="__x__", invite_id="__y__", all_invites=True, users=("__z__",)),
        Reads(family_id=family.id, invite_id="__y__", users=(parent.user_id,)),
        Reads(token_hash="__t__"),
    ):
        found = await store.read(reads)
        assert not found.invites
        assert found.family is None or found.family.id == family.id
        assert all(m.family_id in (None, family.id) for m in found.memberships.values())
    assert (await store.read(Reads(family_id="__x__"))).family is None


async def test_family_store_a_refused_change_writes_nothing(families: FamilyStores) -> None:
    store, raw = families.store, families.raw
    parent = person("mum")
    family = await founded(store, parent)
    before = raw(("families", family.id))

    def refuse(household: Household) -> tuple[Household, None]:
        assert household.family is not None
        renamed = household.family.model_copy(update={"name": "Renamed"})
        changed = membership.remove(
            Household(family=renamed), caller=parent.user_id, target=parent.user_id, now=NOW
        )
        raise LastParent(f"refused after deciding {changed[1]}")

    with pytest.raises(LastParent):
        await store.apply(Reads(family_id=family.id, users=(parent.user_id,)), refuse)
    assert raw(("families", family.id)) == before
    assert raw((parent.user_id, "client", "family", "current")) is not None


async def test_family_store_the_last_member_leaving_deletes_everything_of_the_family(
    families: FamilyStores,
) -> None:
    store, raw = families.store, families.raw
    parent = person("mum")
    family = await founded(store, parent)
    hashes = [await invited(store, family, parent, uses=1) for _ in range(3)]
    everything = await store.read(Reads(family_id=family.id, all_invites=True))
    assert len(everything.invites) == 3
    change = partial(membership.remove, caller=parent.user_id, target=parent.user_id, now=NOW)
    reads = Reads(family_id=family.id, all_invites=True, users=(parent.user_id,))
    _, left = await store.apply(reads, change)
    assert left is None
    assert raw(("families", family.id)) is None
    assert raw((parent.user_id, "client", "family", "current")) is None
    for hashed in hashes:
        assert raw(("inviteTokens", hashed)) is None
    for invite_id in everything.invites:
        assert raw(("families", family.id, "invites", invite_id)) is None
    membership_doc = raw((parent.user_id, "server", "family", "membership")) or {}
    assert "familyId" not in membership_doc


async def test_family_store_five_racing_for_one_use_one_joins(families: FamilyStores) -> None:
    """Five instances redeem a single-use link at once: exactly one joins, the others are
    told it is used up, and the family, invite and mirrors agree."""
    store, raw = families.store, families.raw
    parent = person("mum")
    family = await founded(store, parent)
    hashed = await invited(store, family, parent, uses=1)
    racers = [person(f"racer{n}") for n in range(5)]
    instances = [store, *families.others]

    async def join(instance: FamilyStore, racer: Person) -> Family:
        change = partial(membership.join, person=racer, now=NOW, max_members=10)
        _, joined = await instance.apply(Reads(token_hash=hashed, users=(racer.user_id,)), change)
        return joined

    results = await asyncio.gather(
        *(join(i, r) for i, r in zip(instances, racers, strict=True)), return_exceptions=True
    )
    assert sum(isinstance(r, Family) for r in results) == 1, results
    assert all(isinstance(r, (Family, InviteUsedUp)) for r in results), results
    final = await store.read(Reads(token_hash=hashed))
    assert final.family is not None and len(final.family.members) == 2
    (invite,) = final.invites.values()
    assert invite.uses == 1 and len(invite.used_by) == 1
    winner = invite.used_by[0]
    for racer in racers:
        mirror = raw((racer.user_id, "client", "family", "current"))
        assert (mirror is not None) is (racer.user_id == winner)
    assert (
        family_violations(
            raw(("families", family.id)),
            {p.user_id: raw((p.user_id, "client", "family", "current")) for p in [parent, *racers]},
            {
                p.user_id: raw((p.user_id, "server", "family", "membership"))
                for p in [parent, *racers]
            },
        )
        == []
    )


async def test_family_store_concurrent_attempts_all_count(families: FamilyStores) -> None:
    """Three instances count attempts against one user's allowance at once: none is lost.
    (Three, not five: on the emulator, transactions contending for one document wait
    ~2 s for its lock timeout each round; three took ~2 s here, five 4–9 s.)"""
    store = families.store
    uid = f"u{secrets.token_hex(4)}"
    instances = [store, *families.others[:2]]

    async def attempt(instance: FamilyStore, n: int) -> None:
        change = partial(
            membership.attempt,
            user_id=uid,
            allowance="joins",
            now=NOW + timedelta(seconds=n),
            limit=10,
        )
        await instance.apply(Reads(users=(uid,)), change)

    await asyncio.gather(*(attempt(i, n) for n, i in enumerate(instances)))
    counted = (await store.read(Reads(users=(uid,)))).memberships[uid]
    assert len(counted.joins_tried) == 3


# -- task sections -------------------------------------------------------------------------


@pytest.fixture(params=["memory", "firestore"])
async def sections_store(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[TaskDocumentStore]:
    if request.param == "memory":
        yield InMemoryTaskDocumentStore()
        return
    stores = connect(PROJECT)
    yield stores.sections
    stores.close()


def task_record(task_id: str, conversation_id: str, at: datetime) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        conversation_id=conversation_id,
        tool_call_id=f"call_{task_id}",
        tool="create_lesson",
        display_text="Creating lesson",
        seq=0,
        status="queued",
        created_at=at,
        updated_at=at,
    )


async def test_section_store_applies_changes_one_after_the_other(
    sections_store: TaskDocumentStore,
) -> None:
    uid = f"u-{secrets.token_hex(4)}"
    record = task_record("task_a", "conv_a", NOW)
    assert await sections_store.get(uid, "task_a") is None
    opened = await sections_store.apply(uid, "task_a", lambda s: sections.follow(s, record, NOW))
    assert opened is not None and opened.status == "queued"
    again = await sections_store.apply(uid, "task_a", lambda s: sections.follow(s, record, NOW))
    assert again == opened  # nothing to write
    running = await sections_store.apply(uid, "task_a", lambda s: sections.started(s, NOW))
    assert running is not None and running.status == "running"

    async def step(n: int) -> None:
        await sections_store.apply(
            uid,
            "task_a",
            lambda s: None if s is None else sections.with_steps(s, [Step(1, n, f"step {n}")], NOW),
        )

    await asyncio.gather(*(step(n) for n in range(1, 6)))
    stored = await sections_store.get(uid, "task_a")
    assert stored is not None
    # Five concurrent writers all landed, each step once (a later step may make an
    # earlier one, landing after it, count as known: steps of one attempt come in order).
    texts = [u.text for u in stored.updates]
    assert len(texts) == len(set(texts)) >= 1
    with pytest.raises(IllegalTransition):
        await sections_store.apply(uid, "task_a", lambda s: s and sections.move(s, "queued", NOW))
    done = await sections_store.apply(
        uid,
        "task_a",
        lambda s: s and sections.ended(s, "completed", NOW, sections.Ending("Created “Tides”.")),
    )
    assert done is not None and (done.status, done.summary) == ("completed", "Created “Tides”.")
    assert (await sections_store.get(uid, "task_a")) == done
    assert await sections_store.get(uid, "__reserved__") is None


async def test_section_store_lists_newest_first_by_conversation(
    sections_store: TaskDocumentStore,
) -> None:
    uid = f"u-{secrets.token_hex(4)}"
    for n, conversation_id in enumerate(["c1", "c2", "c1", "c1"]):
        record = task_record(f"task_{n}", conversation_id, NOW + timedelta(seconds=n))
        await sections_store.apply(
            uid, record.task_id, lambda s, r=record: sections.follow(s, r, NOW)
        )
    assert [t.id for t in await sections_store.recent(uid)] == [
        "task_3",
        "task_2",
        "task_1",
        "task_0",
    ]
    assert [t.id for t in await sections_store.recent(uid, 2)] == ["task_3", "task_2"]
    listed = await sections_store.recent(uid, conversation_id="c1")
    assert [t.id for t in listed] == ["task_3", "task_2", "task_0"]
    assert await sections_store.recent(f"other-{uid}") == []


async def test_section_store_lists_a_users_sections_a_page_at_a_time(
    sections_store: TaskDocumentStore,
) -> None:
    uid = f"u-{secrets.token_hex(4)}"
    for n in (2, 0, 1):
        record = task_record(f"task_{n}", "c1", NOW)
        await sections_store.apply(
            uid, record.task_id, lambda s, r=record: sections.follow(s, r, NOW)
        )
    first = await sections_store.listing(uid, None, 2)
    assert [(t.id, t.status) for t in first] == [("task_0", "queued"), ("task_1", "queued")]
    assert [t.id for t in await sections_store.listing(uid, "task_1", 2)] == ["task_2"]
    assert await sections_store.listing(f"other-{uid}", None, 2) == []


async def test_section_store_deletes_a_conversations_sections_only(
    sections_store: TaskDocumentStore,
) -> None:
    uid = f"u-{secrets.token_hex(4)}"
    for n, conversation_id in enumerate(["c1", "c2", "c1"]):
        record = task_record(f"task_{n}", conversation_id, NOW + timedelta(seconds=n))
        await sections_store.apply(
            uid, record.task_id, lambda s, r=record: sections.follow(s, r, NOW)
        )
    assert await sections_store.delete(uid, "c1") == 2
    assert [t.id for t in await sections_store.recent(uid)] == ["task_1"]
    assert await sections_store.delete(uid, "c1") == 0


# -- the ledger and its sections in one write ------------------------------------------


@dataclass
class Book:
    """A ledger store, another instance's (the same for the fake), and the sections
    they write (read through the first instance's section store)."""

    ledger: TaskLedgerStore
    other: TaskLedgerStore
    sections: TaskDocumentStore
    on_firestore: bool


@pytest.fixture(params=["memory", "firestore"])
async def book(request: pytest.FixtureRequest, emulators: object) -> AsyncIterator[Book]:
    if request.param == "memory":
        ledger = InMemoryTaskLedgerStore()
        yield Book(ledger, ledger, ledger.sections, on_firestore=False)
        return
    first, second = connect(PROJECT), connect(PROJECT)
    yield Book(first.ledgers, second.ledgers, first.sections, on_firestore=True)
    first.close()
    second.close()


def submitted(record: TaskRecord) -> Callable[[TaskLedger], tuple[TaskLedger, None, Any]]:
    """Record the task queued and open its section, in one write."""

    def change(ledger: TaskLedger) -> tuple[TaskLedger, None, Any]:
        updated = ledger.model_copy(update={"tasks": {**ledger.tasks, record.task_id: record}})
        return updated, None, {record.task_id: lambda s: sections.follow(s, record, NOW)}

    return change


def ended(
    task_id: str, summary: Callable[[TaskLedger], str]
) -> Callable[[TaskLedger], tuple[TaskLedger, int, Any]]:
    """End the task completed in the ledger and in its section (with ``summary`` of the
    ledger it was judged on), in one write; it decides the ledger's ``next_seq`` seen."""

    def change(ledger: TaskLedger) -> tuple[TaskLedger, int, Any]:
        record = ledger.tasks[task_id].model_copy(update={"status": "completed"})
        updated = bump(ledger.model_copy(update={"tasks": {**ledger.tasks, task_id: record}}))
        ending = sections.Ending(summary(ledger))
        return (
            updated,
            ledger.next_seq,
            {task_id: lambda s: sections.follow(s, record, NOW, ending)},
        )

    return change


async def test_ledger_store_writes_a_record_and_its_section_together(book: Book) -> None:
    uid = f"u-{secrets.token_hex(4)}"
    record = task_record("task_a", "conv_a", NOW)
    await book.ledger.apply_with_sections(uid, submitted(record))
    opened = await book.sections.get(uid, "task_a")
    assert opened is not None and opened.status == "queued"
    assert (await book.other.get(uid)).tasks["task_a"].status == "queued"
    await book.sections.apply(uid, "task_a", lambda s: sections.started(s, NOW))
    _, seen = await book.other.apply_with_sections(
        uid, ended("task_a", lambda led: f"Done at {led.next_seq}.")
    )
    done = await book.sections.get(uid, "task_a")
    assert done is not None and (done.status, done.summary) == ("completed", f"Done at {seen}.")
    assert (await book.ledger.get(uid)).tasks["task_a"].status == "completed"
    # A change that names no section is ``apply``; one whose section change writes
    # nothing writes the ledger alone.
    ledger, _ = await book.ledger.apply_with_sections(uid, lambda led: (bump(led), None, {}))
    again, _ = await book.ledger.apply_with_sections(
        uid, lambda led: (bump(led), None, {"task_a": lambda s: None})
    )
    assert again.next_seq == ledger.next_seq + 1
    assert await book.sections.get(uid, "task_a") == done


async def test_ledger_store_writes_neither_when_a_section_change_raises(book: Book) -> None:
    uid = f"u-{secrets.token_hex(4)}"
    record = task_record("task_a", "conv_a", NOW)
    await book.ledger.apply_with_sections(uid, submitted(record))
    before = await book.other.get(uid)

    def illegal(led: TaskLedger) -> tuple[TaskLedger, None, Any]:
        return bump(led), None, {"task_a": lambda s: s and sections.move(s, "completed", NOW)}

    with pytest.raises(IllegalTransition):  # queued cannot become completed
        await book.ledger.apply_with_sections(uid, illegal)
    assert await book.other.get(uid) == before
    section = await book.sections.get(uid, "task_a")
    assert section is not None and section.status == "queued"


async def test_ledger_store_loses_no_write_to_the_section_or_the_ledger(book: Book) -> None:
    """Steps appended to the section and other changes to the ledger, from another
    instance, race the write that ends the task: each lands once, and the end lands
    with its summary (each write's precondition sent the loser round again)."""
    uid = f"u-{secrets.token_hex(4)}"
    record = task_record("task_a", "conv_a", NOW).model_copy(update={"status": "running"})
    await book.ledger.apply_with_sections(uid, submitted(record))
    await book.sections.apply(uid, "task_a", lambda s: sections.started(s, NOW))

    async def step(n: int) -> None:
        await book.sections.apply(
            uid,
            "task_a",
            lambda s: None if s is None else sections.with_steps(s, [Step(n, 1, f"step {n}")], NOW),
        )

    async def end() -> None:
        await asyncio.sleep(0.01)
        await book.ledger.apply_with_sections(uid, ended("task_a", lambda _: "Done."))

    await asyncio.gather(
        *(step(n) for n in range(1, 6)), *(book.other.mutate(uid, bump) for _ in range(5)), end()
    )
    ledger = await book.ledger.get(uid)
    section = await book.sections.get(uid, "task_a")
    assert section is not None
    assert ledger.next_seq == 6  # five bumps and the end's
    assert (ledger.tasks["task_a"].status, section.status) == ("completed", "completed")
    assert section.summary == "Done."
    # Steps that lost to the end are refused by the finished section, never written over it.
    assert len({u.text for u in section.updates}) == len(section.updates)


async def test_ledger_store_judges_again_when_either_changed_between_read_and_write(
    book: Book, db: firestore.Client
) -> None:
    """Another writer lands between this write's reads and its commit, first on the
    section, then on the ledger: nothing of the first try lands, and the second is
    judged on what the other wrote (Firestore only: the fake has no such moment)."""
    if not book.on_firestore:
        pytest.skip("the in-memory store reads and writes with no moment between")
    uid = f"u-{secrets.token_hex(4)}"
    record = task_record("task_a", "conv_a", NOW).model_copy(update={"status": "running"})
    await book.ledger.apply_with_sections(uid, submitted(record))
    section_ref = db.collection(uid).document("client").collection("tasks").document("task_a")
    ledger_ref = db.collection(uid).document("server")
    tries: list[str] = []

    def change(led: TaskLedger) -> tuple[TaskLedger, int, Any]:
        updated, seen, named = ended("task_a", lambda _: "Done.")(led)

        def follow(s: TaskDocument | None) -> TaskDocument | None:
            tries.append(s.title if s is not None else "-")
            if len(tries) == 1:  # the section changes under this write
                section_ref.update({"title": "Renamed"})
            elif len(tries) == 2:  # then the ledger does
                ledger_ref.update({"nextSeq": led.next_seq + 10})
            return named["task_a"](s)

        return updated, seen, {"task_a": follow}

    _, seen = await book.ledger.apply_with_sections(uid, change)
    assert tries == ["Creating lesson", "Renamed", "Renamed"]
    assert seen == 10  # judged on the ledger the other writer left
    ledger = await book.other.get(uid)
    section = await book.sections.get(uid, "task_a")
    assert section is not None
    assert (ledger.next_seq, ledger.tasks["task_a"].status) == (11, "completed")
    assert (section.title, section.status, section.summary) == ("Renamed", "completed", "Done.")


# -- an account's erasure (DESIGN §15) -------------------------------------------------


@dataclass
class Erasing:
    accounts: AccountStore
    conversations: ConversationStore
    ledgers: TaskLedgerStore


@pytest.fixture(params=["memory", "firestore"])
async def erasing(request: pytest.FixtureRequest, emulators: object) -> AsyncIterator[Erasing]:
    if request.param == "memory":
        conversations, ledgers = InMemoryConversationStore(), InMemoryTaskLedgerStore()
        yield Erasing(accounts_beside([conversations, ledgers]), conversations, ledgers)
        return
    stores = connect(PROJECT)
    yield Erasing(stores.accounts, stores.conversations, stores.ledgers)
    stores.close()


def a_deletion(uid: str) -> Deletion:
    return Deletion(id=deletion_id_of(uid), uid_hash=uid_hash(uid), requested_at=NOW)


async def test_account_store_begins_a_deletion_once_and_its_tombstone_is_read(
    erasing: Erasing,
) -> None:
    uid, other = f"u{secrets.token_hex(4)}", f"u{secrets.token_hex(4)}"
    accounts = erasing.accounts
    assert await accounts.deletion(deletion_id_of(uid)) is None
    assert await accounts.erased([uid, other]) == frozenset()
    first = await accounts.begin(a_deletion(uid))
    again = await accounts.begin(a_deletion(uid).model_copy(update={"requested_by": "parent"}))
    assert again == first and again.requested_by == "self"
    assert await accounts.deletion(first.id) == first
    assert await accounts.erased([uid, other, uid]) == frozenset({uid})


async def test_account_store_pages_the_users_documents_at_any_depth_with_its_record(
    erasing: Erasing,
) -> None:
    uid, other = f"u{secrets.token_hex(4)}", f"u{secrets.token_hex(4)}"
    accounts, conversations = erasing.accounts, erasing.conversations
    made = sorted((conversation() for _ in range(3)), key=lambda c: c.id)
    for one in made:
        await conversations.create(uid, one)
    segment = ArchiveSegment(
        conversation_id=made[0].id, segment=1, messages=[message(1)], created_at=NOW
    )
    await conversations.archive(uid, segment)
    await erasing.ledgers.mutate(uid, lambda led: led.model_copy(update={"next_seq": 1}))
    kept = conversation()
    await conversations.create(other, kept)
    read = await accounts.begin(a_deletion(uid))

    everything = await accounts.listed(uid, 100)
    assert everything == sorted(everything) and len(everything) == 5
    assert (uid, "server") in everything
    assert (uid, "client", "conversations", made[0].id, "archive", "000001") in everything
    page = await accounts.listed(uid, 2)
    assert page == everything[:2]
    after = read.model_copy(update={"version": 1, "step": "documents"})
    assert await accounts.commit(read, after, page)
    # A second delivery of the same page, judged on the record it read, writes nothing.
    late = read.model_copy(update={"version": 1, "step": "files"})
    assert not await accounts.commit(read, late, everything[2:])
    assert await accounts.listed(uid, 100) == everything[2:]
    assert await accounts.deletion(read.id) == after
    assert await accounts.commit(after, after.model_copy(update={"version": 2}), everything[2:])
    assert await accounts.listed(uid, 100) == []
    assert await conversations.get(other, kept.id) is not None


async def test_store_untouched_finds_the_oldest_across_users_and_keeps_one_touched_since(
    store: ConversationStore,
) -> None:
    """The retention sweep's query: every user's conversations changed before a time,
    least recently changed first; its delete takes one only while it is still that old."""
    # Dated long before anything another test makes, so the query sees only these.
    long_ago = datetime(1971, 1, 1, tzinfo=UTC)
    users = [f"u{secrets.token_hex(4)}" for _ in range(3)]
    made = []
    for n, uid in enumerate(users):
        created = conversation().model_copy(update={"updated_at": long_ago + timedelta(days=n)})
        await store.create(uid, created)
        made.append((uid, created.id))
    fresh = conversation()  # changed at NOW: never found
    await store.create(users[0], fresh)
    before = long_ago + timedelta(days=2)

    found = [(u.user_id, u.conversation_id) for u in await store.untouched(before, 100)]
    mine = [f for f in found if f[0] in users]
    assert mine == made[:2]  # oldest first; the one changed at the cutoff is not older
    assert [(u.user_id, u.conversation_id) for u in await store.untouched(before, 1)] == made[:1]

    uid, touched = made[1]
    await store.mutate(uid, touched, lambda c: c.model_copy(update={"updated_at": NOW}))
    with pytest.raises(ConversationTouched):
        await store.delete(uid, touched, NOW, untouched_before=before)
    assert await store.get(uid, touched) is not None
    assert await store.delete(*made[0], NOW, untouched_before=before) == []
    assert await store.get(*made[0]) is None
    left = [(u.user_id, u.conversation_id) for u in await store.untouched(before, 100)]
    assert [f for f in left if f[0] in users] == []
