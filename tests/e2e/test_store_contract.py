"""The ``ConversationStore`` contract, held by the in-memory fake and by the Firestore
adapter against the emulator alike."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from shared.errors import ConversationTooLarge, NotFound, RunInProgress, StoreError
from shared.schemas.documents import ContentPart, Conversation, Message
from shared.store.base import ConversationStore
from shared.store.firestore import FirestoreConversationStore
from shared.store.memory import InMemoryConversationStore
from tests.e2e.conftest import PROJECT

pytestmark = pytest.mark.emulator

NOW = datetime(2026, 3, 1, tzinfo=UTC)


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
    firestore_store = FirestoreConversationStore.connect(PROJECT)
    yield firestore_store
    firestore_store.close()


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
    others = (
        [FirestoreConversationStore.connect(PROJECT) for _ in range(2)]
        if isinstance(store, FirestoreConversationStore)
        else [store, store]
    )
    writers = [store, *others]
    await asyncio.gather(
        *(writers[n % 3].mutate(uid, created.id, append(message(n))) for n in range(24))
    )
    stored = await store.get(uid, created.id)
    assert stored is not None
    assert sorted(m.id for m in stored.messages) == sorted(f"msg_{n}" for n in range(24))
    for other in others:
        if isinstance(other, FirestoreConversationStore) and other is not store:
            other.close()
