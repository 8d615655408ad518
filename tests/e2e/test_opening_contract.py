"""The ``OpeningStore`` contract (a user's ledger and one conversation in one commit),
held by the in-memory fake and by the Firestore adapter against the emulator alike."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from shared.errors import ConversationTooLarge, RateLimited, StoreError
from shared.schemas.documents import ContentPart, Conversation, Message
from shared.schemas.server import TaskLedger
from shared.store.base import ConversationStore, OpeningStore, TaskLedgerStore
from shared.store.firestore import connect
from shared.store.limits import MAX_DOCUMENT_BYTES
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryOpeningStore,
    InMemoryTaskLedgerStore,
)
from tests.e2e.conftest import PROJECT

pytestmark = pytest.mark.emulator

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@dataclass
class Stores:
    """An opening store and the stores it writes through, and another instance's
    conversations and ledger (the same stores for the fake)."""

    openings: OpeningStore
    conversations: ConversationStore
    ledger: TaskLedgerStore
    other_conversations: ConversationStore
    other_ledger: TaskLedgerStore
    on_firestore: bool


@pytest.fixture(params=["memory", "firestore"])
async def stores(request: pytest.FixtureRequest, emulators: object) -> AsyncIterator[Stores]:
    if request.param == "memory":
        conversations, ledger = InMemoryConversationStore(), InMemoryTaskLedgerStore()
        openings = InMemoryOpeningStore(conversations, ledger)
        yield Stores(openings, conversations, ledger, conversations, ledger, on_firestore=False)
        return
    first, second = connect(PROJECT), connect(PROJECT)
    yield Stores(
        first.openings,
        first.conversations,
        first.ledgers,
        second.conversations,
        second.ledgers,
        on_firestore=True,
    )
    first.close()
    second.close()


def message(n: int, text: str = "") -> Message:
    return Message(
        id=f"msg_{n}",
        role="user",
        created_at=NOW,
        status="complete",
        content=[ContentPart.of_text(text or f"message {n}")],
    )


def fresh(conversation_id: str) -> Conversation:
    return Conversation(
        id=conversation_id,
        participant_ids=["u"],
        created_at=NOW,
        updated_at=NOW,
        last_message_at=NOW,
        messages=[message(0)],
    )


def bump(ledger: TaskLedger) -> TaskLedger:
    return ledger.model_copy(update={"next_seq": ledger.next_seq + 1})


def appended(conversation: Conversation, new: Message) -> Conversation:
    return conversation.model_copy(update={"messages": [*conversation.messages, new]})


def opening(
    cid: str, new: Message, seen: list[tuple[int, int]] | None = None
) -> Callable[[TaskLedger, Conversation | None], tuple[TaskLedger, Conversation, int]]:
    """Bump the ledger and append ``new`` (or make the conversation); it decides the
    ledger's ``next_seq`` it was given, and notes what it saw in ``seen``."""

    def change(
        ledger: TaskLedger, conversation: Conversation | None
    ) -> tuple[TaskLedger, Conversation, int]:
        if seen is not None:
            seen.append((ledger.next_seq, len(conversation.messages) if conversation else 0))
        updated = fresh(cid) if conversation is None else appended(conversation, new)
        return bump(ledger), updated, ledger.next_seq

    return change


def ids() -> tuple[str, str]:
    return f"u{secrets.token_hex(4)}", f"conv_{secrets.token_hex(6)}"


async def test_opening_writes_the_ledger_and_a_new_conversation_together(
    stores: Stores,
) -> None:
    uid, cid = ids()

    def make(
        ledger: TaskLedger, conversation: Conversation | None
    ) -> tuple[TaskLedger, Conversation, str]:
        assert conversation is None
        return bump(ledger), fresh(cid), "made"

    written, decided = await stores.openings.open(uid, cid, make, new=True)
    assert decided == "made" and written == fresh(cid)
    assert await stores.other_conversations.get(uid, cid) == fresh(cid)
    assert (await stores.other_ledger.get(uid)).next_seq == 1
    # Then an existing conversation: its message appended, the ledger bumped again.
    written, seq = await stores.openings.open(uid, cid, opening(cid, message(1)), new=False)
    assert seq == 1 and [m.id for m in written.messages] == ["msg_0", "msg_1"]
    assert await stores.other_conversations.get(uid, cid) == written
    assert (await stores.other_ledger.get(uid)).next_seq == 2


async def test_opening_refused_writes_neither(stores: Stores) -> None:
    uid, cid = ids()

    def refuse(
        ledger: TaskLedger, conversation: Conversation | None
    ) -> tuple[TaskLedger, Conversation, None]:
        raise RateLimited("No.", 5)

    with pytest.raises(RateLimited):
        await stores.openings.open(uid, cid, refuse, new=True)
    assert await stores.other_conversations.get(uid, cid) is None
    assert await stores.other_ledger.get(uid) == TaskLedger()

    await stores.openings.open(uid, cid, opening(cid, message(1)), new=True)
    before = await stores.other_conversations.get(uid, cid)
    ledger = await stores.other_ledger.get(uid)
    with pytest.raises(RateLimited):
        await stores.openings.open(uid, cid, refuse, new=False)
    with pytest.raises(ConversationTooLarge):  # too large: refused as a whole too
        big = message(2, "x" * MAX_DOCUMENT_BYTES)
        await stores.openings.open(uid, cid, opening(cid, big), new=False)
    assert await stores.other_conversations.get(uid, cid) == before
    assert await stores.other_ledger.get(uid) == ledger


async def test_opening_over_changed_documents_is_judged_again_on_fresh_reads(
    stores: Stores,
) -> None:
    """Another instance writes the ledger, then the conversation, after this one last
    saw them: each opening's first try (on the remembered versions) loses, and it lands
    on the latest of both, deciding on what it wrote over."""
    uid, cid = ids()
    await stores.openings.open(uid, cid, opening(cid, message(1)), new=True)  # remembered here
    for n, other_write in enumerate(("ledger", "conversation")):
        if other_write == "ledger":
            await stores.other_ledger.mutate(uid, bump)
        else:
            await stores.other_conversations.mutate(uid, cid, lambda c: appended(c, message(9)))
        seen: list[tuple[int, int]] = []
        count = len((await stores.other_conversations.get(uid, cid) or fresh(cid)).messages)
        seq = (await stores.other_ledger.get(uid)).next_seq
        written, decided = await stores.openings.open(
            uid, cid, opening(cid, message(20 + n), seen), new=False
        )
        assert decided == seq and seen[-1] == (seq, count)
        if stores.on_firestore:
            assert len(seen) == 2  # first on the out-of-date copy: that write lost
        assert await stores.other_conversations.get(uid, cid) == written
        assert (await stores.other_ledger.get(uid)).next_seq == seq + 1


async def test_a_new_conversation_that_exists_is_judged_on_what_is_stored(
    stores: Stores,
) -> None:
    uid, cid = ids()
    await stores.other_conversations.create(uid, fresh(cid))
    seen: list[Conversation | None] = []

    def make(
        ledger: TaskLedger, conversation: Conversation | None
    ) -> tuple[TaskLedger, Conversation, None]:
        seen.append(conversation)
        if conversation is not None:
            raise StoreError(f"conversation {cid} already exists")
        return bump(ledger), fresh(cid), None

    with pytest.raises(StoreError):
        await stores.openings.open(uid, cid, make, new=True)
    assert seen[-1] == fresh(cid)
    assert await stores.other_ledger.get(uid) == TaskLedger()


async def test_concurrent_openings_from_two_instances_all_land(stores: Stores) -> None:
    uid, cid = ids()
    await stores.openings.open(uid, cid, opening(cid, message(0, "first")), new=True)
    connection = connect(PROJECT) if stores.on_firestore else None
    other = (
        connection.openings
        if connection is not None
        else InMemoryOpeningStore(
            stores.conversations,  # type: ignore[arg-type]
            stores.ledger,  # type: ignore[arg-type]
        )
    )
    both = [stores.openings, other]
    try:
        results = await asyncio.gather(
            *(both[n % 2].open(uid, cid, opening(cid, message(n + 1)), new=False) for n in range(6))
        )
    finally:
        if connection is not None:
            connection.close()
    assert sorted(seq for _, seq in results) == list(range(1, 7))
    stored = await stores.other_conversations.get(uid, cid)
    assert stored is not None
    assert sorted(m.id for m in stored.messages) == sorted(
        ["msg_0", *(f"msg_{n + 1}" for n in range(6))]
    )
    assert (await stores.other_ledger.get(uid)).next_seq == 7
