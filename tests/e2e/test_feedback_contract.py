"""The ``FeedbackStore`` contract (``shared/store/feedback.py``), held by the in-memory
fake and by the Firestore adapter against the emulator alike: one record per rated
reply (the latest), read back oldest first, forgotten with its conversation only, and
kept only beside a conversation that exists."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.errors import NotFound
from shared.schemas.documents import Conversation
from shared.schemas.server import FeedbackRecord
from shared.store.base import ConversationStore
from shared.store.feedback import FeedbackStore
from shared.store.firestore import connect
from shared.store.memory.conversations import InMemoryConversationStore
from shared.store.memory.feedback import InMemoryFeedbackStore
from tests.e2e.conftest import PROJECT

pytestmark = pytest.mark.emulator

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "firestore"])
async def stores(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[tuple[FeedbackStore, ConversationStore]]:
    """A feedback store and the conversations it keeps records beside."""
    if request.param == "memory":
        conversations = InMemoryConversationStore()
        yield InMemoryFeedbackStore(conversations), conversations
        return
    connected = connect(PROJECT)
    try:
        yield connected.feedback, connected.conversations
    finally:
        connected.close()


async def started(store: ConversationStore, uid: str, *ids: str) -> None:
    for conversation_id in ids:
        times = {"created_at": NOW, "updated_at": NOW, "last_message_at": NOW}
        await store.create(uid, Conversation(id=conversation_id, participant_ids=[uid], **times))


def record(conversation: str, message: str, rating: str, minutes: int) -> FeedbackRecord:
    return FeedbackRecord(
        conversation_id=conversation,
        message_id=message,
        rating=rating,  # type: ignore[arg-type]
        at=NOW + timedelta(minutes=minutes),
        model="demo",
    )


async def test_feedback_keeps_the_latest_per_reply_and_forgets_by_conversation(
    stores: tuple[FeedbackStore, ConversationStore],
) -> None:
    feedback, conversations = stores
    uid, other = f"u{secrets.token_hex(4)}", f"u{secrets.token_hex(4)}"
    await started(conversations, uid, "c1", "c2")
    await started(conversations, other, "c1")
    assert await feedback.of(uid) == []
    await feedback.keep(uid, record("c1", "m1", "down", 1))
    await feedback.keep(uid, record("c2", "m2", "up", 2))
    await feedback.keep(uid, record("c1", "m1", "up", 3))  # the same reply, rated again
    await feedback.keep(other, record("c1", "m1", "down", 0))
    kept = await feedback.of(uid)
    assert [(r.conversation_id, r.message_id, r.rating) for r in kept] == [
        ("c2", "m2", "up"),
        ("c1", "m1", "up"),
    ]
    await feedback.forget(uid, "c1")
    await feedback.forget(uid, "c-none")
    assert [r.conversation_id for r in await feedback.of(uid)] == ["c2"]
    assert [r.rating for r in await feedback.of(other)] == ["down"]


async def test_feedback_is_kept_only_beside_a_conversation_that_exists(
    stores: tuple[FeedbackStore, ConversationStore],
) -> None:
    """A rating that lands once its conversation is deleted keeps nothing: the delete
    forgot the records already, and none may outlive it."""
    feedback, conversations = stores
    uid = f"u{secrets.token_hex(4)}"
    with pytest.raises(NotFound):
        await feedback.keep(uid, record("c-never", "m1", "up", 1))
    await started(conversations, uid, "c1")
    await feedback.keep(uid, record("c1", "m1", "up", 1))
    await conversations.delete(uid, "c1", NOW + timedelta(hours=1))
    await feedback.forget(uid, "c1")
    with pytest.raises(NotFound):
        await feedback.keep(uid, record("c1", "m1", "down", 2))
    assert await feedback.of(uid) == []
