"""The ``FeedbackStore`` contract (``shared/store/feedback.py``), held by the in-memory
fake and by the Firestore adapter against the emulator alike: one record per rated
reply (the latest), read back oldest first, and forgotten with its conversation only."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.schemas.server import FeedbackRecord
from shared.store.feedback import FeedbackStore
from shared.store.firestore import connect
from shared.store.memory.feedback import InMemoryFeedbackStore
from tests.e2e.conftest import PROJECT

pytestmark = pytest.mark.emulator

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "firestore"])
async def feedback(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[FeedbackStore]:
    if request.param == "memory":
        yield InMemoryFeedbackStore()
        return
    stores = connect(PROJECT)
    try:
        yield stores.feedback
    finally:
        stores.close()


def record(conversation: str, message: str, rating: str, minutes: int) -> FeedbackRecord:
    return FeedbackRecord(
        conversation_id=conversation,
        message_id=message,
        rating=rating,  # type: ignore[arg-type]
        at=NOW + timedelta(minutes=minutes),
        model="demo",
    )


async def test_feedback_keeps_the_latest_per_reply_and_forgets_by_conversation(
    feedback: FeedbackStore,
) -> None:
    uid, other = f"u{secrets.token_hex(4)}", f"u{secrets.token_hex(4)}"
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
