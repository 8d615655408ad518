"""The ``SpentTokens`` contract (``shared/appcheck/replays.py``), held by the in-memory
fake and by the Firestore adapter against the emulator alike: a limited-use App Check
token is spent once, and of many racing first uses exactly one wins, even from
another process's client."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.appcheck.replays import InMemorySpentTokens, SpentTokens
from shared.store.firestore import connect
from shared.store.firestore.appcheck import FirestoreSpentTokens
from tests.e2e.conftest import PROJECT

pytestmark = pytest.mark.emulator

EXPIRES = datetime.now(UTC) + timedelta(hours=1)


@pytest.fixture(params=["memory", "firestore"])
async def spent(
    request: pytest.FixtureRequest, emulators: object
) -> AsyncIterator[tuple[SpentTokens, SpentTokens]]:
    """Two views of one record, as two processes would hold it."""
    if request.param == "memory":
        shared = InMemorySpentTokens()
        yield shared, shared
        return
    one, two = connect(PROJECT), connect(PROJECT)
    try:
        yield FirestoreSpentTokens(one.client), FirestoreSpentTokens(two.client)
    finally:
        one.close()
        two.close()


async def test_a_token_is_spent_once(spent: tuple[SpentTokens, SpentTokens]) -> None:
    here, there = spent
    token_id, other = secrets.token_hex(8), secrets.token_hex(8)
    assert await here.consume(token_id, EXPIRES) is True
    assert await here.consume(token_id, EXPIRES) is False
    assert await there.consume(token_id, EXPIRES) is False  # another process knows too
    assert await there.consume(other, EXPIRES) is True


async def test_of_racing_first_uses_one_wins(spent: tuple[SpentTokens, SpentTokens]) -> None:
    here, there = spent
    token_id = secrets.token_hex(8)
    won = await asyncio.gather(*(s.consume(token_id, EXPIRES) for s in (here, there) * 4))
    assert won.count(True) == 1
