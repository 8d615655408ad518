"""Verbatim family messages are limited per sender, and a file lookup reads one archive
segment (issue 34, defect 8): one member sent 1,500 messages of 32 KiB in 23 s, all
delivered, and a lookup then read all 1,480 segments of each recipient's copy."""

from __future__ import annotations

import copy
import io
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from PIL import Image
from spark_http.app import ApiApp

from shared.auth.base import StaticTokenVerifier, User
from shared.clock import ManualClock
from shared.errors import MemberNotFound, RateLimited
from shared.families import allowance
from shared.families.allowance import SendLimits
from shared.families.messages import Target
from shared.llm.scripted import ScriptedProvider
from shared.schemas.server import MinuteBytes, SentMessages
from shared.store.memory import InMemoryFamilyStore
from shared.store.patch import stored_size
from tests.unit.helpers import Fakes, Harness, make_service, serving

MUM, KID, EVE = User(uid="mum", name="Mum"), User(uid="kid", name="Sam"), User(uid="eve")
MESSAGES = "/api/spark/agent/messages"
T0 = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)


# -- the allowance, pure ---------------------------------------------------------------------


def test_the_minute_allows_its_messages_and_says_when_the_oldest_leaves_it() -> None:
    limits = SendLimits(messages_per_minute=3, bytes_per_hour=10_000)
    sent = SentMessages()
    for seconds in (0, 10, 20):
        sent = allowance.admit(sent, 100, T0 + timedelta(seconds=seconds), limits)
    with pytest.raises(RateLimited) as refused:
        allowance.admit(sent, 100, T0 + timedelta(seconds=25), limits)
    assert refused.value.retry_after == 35  # the first leaves the minute at 60 s
    assert "3 messages to your family in the last minute" in refused.value.message
    assert "Try again in 35 seconds." in refused.value.message
    later = allowance.admit(sent, 100, T0 + timedelta(seconds=60), limits)
    assert len(later.recent) == 3


def test_the_hour_allows_its_bytes_and_says_when_enough_of_them_leave_it() -> None:
    limits = SendLimits(messages_per_minute=100, bytes_per_hour=100_000)
    sent = SentMessages()
    for minutes, size in ((0, 40_000), (5, 30_000), (10, 20_000)):
        sent = allowance.admit(sent, size, T0 + timedelta(minutes=minutes), limits)
    now = T0 + timedelta(minutes=20)
    with pytest.raises(RateLimited) as refused:
        allowance.admit(sent, 30_000, now, limits)
    # 90,000 used: 30,000 more goes once the first minute's 40,000 leaves the hour, at
    # 13:00:00 (its minute started at 12:00): 39 min 30 s from 12:20:30.
    assert refused.value.retry_after == 39 * 60 + 30
    assert "would pass the 98 KiB allowed in an hour" in refused.value.message
    assert len(sent.minutes) == 3
    admitted = allowance.admit(sent, 30_000, now + timedelta(seconds=39 * 60 + 30), limits)
    assert [m.size for m in admitted.minutes] == [30_000, 20_000, 30_000]


def test_refused_by_both_the_wait_is_the_longer_one_and_both_are_named() -> None:
    limits = SendLimits(messages_per_minute=1, bytes_per_hour=70_000)
    sent = allowance.admit(SentMessages(), 60_000, T0, limits)
    with pytest.raises(RateLimited) as refused:
        allowance.admit(sent, 60_000, T0 + timedelta(seconds=1), limits)
    assert refused.value.retry_after == 3600 - 31  # the hour's bytes, not the minute
    assert "last minute" in refused.value.message and "an hour" in refused.value.message
    assert "Try again in 60 minutes." in refused.value.message


def test_a_message_bigger_than_the_hour_goes_when_nothing_else_was_sent() -> None:
    limits = SendLimits(messages_per_minute=5, bytes_per_hour=65_536)
    sent = allowance.admit(SentMessages(), 80_000, T0, limits)
    assert sent.minutes == [MinuteBytes(start=T0.replace(second=0), size=80_000)]


def test_the_count_stays_small_however_much_is_sent() -> None:
    limits = SendLimits(messages_per_minute=20, bytes_per_hour=10**9)
    sent = SentMessages()
    for n in range(20 * 90):  # 20 a minute for 90 minutes
        sent = allowance.admit(sent, 10, T0 + timedelta(seconds=3 * n), limits)
    assert len(sent.recent) == 20
    assert len(sent.minutes) <= 60


# -- through the api -------------------------------------------------------------------------


def auth(user: User) -> dict[str, str]:
    return {"Authorization": f"Bearer {user.uid}-token"}


async def family(harness: Harness) -> str:
    families = harness.agent.families
    made = await families.create(MUM, "Smiths")
    invite = await families.invite(MUM.uid, made.id, "dependent")
    await families.join(KID, invite.token)
    await families.create(EVE, "Eve's")
    return made.id


def api(harness: Harness) -> ApiApp:
    users = {f"{u.uid}-token": u for u in (MUM, KID, EVE)}
    return ApiApp(harness.agent, StaticTokenVerifier(users), harness.settings)


def snapshot(harness: Harness) -> tuple[Any, Any]:
    families = harness.agent.families._store
    assert isinstance(families, InMemoryFamilyStore)
    return copy.deepcopy(harness.fakes.store._documents), copy.deepcopy(families.documents)


async def test_a_flood_is_refused_with_429_an_honest_retry_after_and_nothing_written() -> None:
    """Seen failing before the allowance: all 40 were delivered (201)."""
    clock = ManualClock(T0)
    harness = make_service(ScriptedProvider([]), clock=clock, family_messages_per_minute=5)
    await family(harness)
    body = {"text": "x" * 32 * 1024, "targetUserId": KID.uid}
    async with serving(api(harness)) as client:
        codes = [(await client.post(MESSAGES, headers=auth(MUM), json=body)) for _ in range(5)]
        assert [c.status_code for c in codes] == [201] * 5
        before = snapshot(harness)
        await clock.advance(12)
        refused = [await client.post(MESSAGES, headers=auth(MUM), json=body) for _ in range(35)]
        assert {r.status_code for r in refused} == {429}
        assert snapshot(harness) == before  # nothing delivered, nothing counted
        answer = refused[0]
        assert answer.json()["error"]["code"] == "rate_limited"
        wait = int(answer.headers["retry-after"])
        assert wait == 60 - 12
        await clock.advance(wait - 1)
        early = await client.post(MESSAGES, headers=auth(MUM), json=body)
        assert early.status_code == 429 and early.headers["retry-after"] == "1"
        await clock.advance(1)
        again = await client.post(MESSAGES, headers=auth(MUM), json=body)
        assert again.status_code == 201, again.text
        # The bytes per hour (1 MiB): one message every 15 s (within the minute's five)
        # until they are spent.
        copy_of = await harness.fakes.store.get(KID.uid, again.json()["conversationId"])
        assert copy_of is not None
        size = stored_size(copy_of.messages[-1].to_firestore())
        sent = 6
        while True:
            await clock.advance(15)
            answer = await client.post(MESSAGES, headers=auth(MUM), json=body)
            if answer.status_code != 201:
                break
            sent += 1
        assert sent == harness.settings.family_message_bytes_per_hour // size
        assert answer.status_code == 429 and "an hour" in answer.json()["error"]["message"]
        # Honest: the first minute's bytes (12:00) leave the hour at 13:00, and then
        # this message goes.
        waited = T0.replace(second=0) + timedelta(hours=1) - clock.now()
        assert int(answer.headers["retry-after"]) == math.ceil(waited.total_seconds())
        await clock.advance(waited.total_seconds() - 1)
        assert (await client.post(MESSAGES, headers=auth(MUM), json=body)).status_code == 429
        await clock.advance(1)
        assert (await client.post(MESSAGES, headers=auth(MUM), json=body)).status_code == 201


async def test_the_count_is_in_the_store_so_two_processes_share_it() -> None:
    """Two agents (two api processes) over the same stores: five a minute in all."""
    clock = ManualClock(T0)
    fakes = Fakes()
    one = make_service(ScriptedProvider([]), clock=clock, fakes=fakes, family_messages_per_minute=5)
    two = make_service(ScriptedProvider([]), clock=clock, fakes=fakes, family_messages_per_minute=5)
    await family(one)
    sent = 0
    for n in range(12):
        agent = (one, two)[n % 2].agent
        try:
            await agent.delivery.deliver(MUM.uid, f"m{n}", Target(user_id=KID.uid))
            sent += 1
        except RateLimited:
            pass
    assert sent == 5


async def test_a_retry_of_a_delivered_message_is_answered_whatever_the_count() -> None:
    clock = ManualClock(T0)
    harness = make_service(ScriptedProvider([]), clock=clock, family_messages_per_minute=1)
    await family(harness)
    delivery = harness.agent.delivery
    first = await delivery.deliver(MUM.uid, "Hi", Target(user_id=KID.uid), idempotency_key="k")
    with pytest.raises(RateLimited):
        await delivery.deliver(MUM.uid, "Again", Target(user_id=KID.uid))
    again = await delivery.deliver(MUM.uid, "Hi", Target(user_id=KID.uid), idempotency_key="k")
    assert again.replayed and again.message_id == first.message_id
    # A message to a stranger is refused for that, not for the count.
    with pytest.raises(MemberNotFound):
        await delivery.deliver(MUM.uid, "psst", Target(user_id=EVE.uid))


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (200, 10, 10)).save(out, "PNG")
    return out.getvalue()


async def test_a_refused_message_with_a_file_reads_no_file() -> None:
    from shared.attachments.service import Requested

    harness = make_service(ScriptedProvider([]), family_messages_per_minute=1)
    await family(harness)
    files = harness.fakes.files
    path = f"{MUM.uid}/uploads/upl_1/photo.png"
    await files.write(path, png(), "image/png")
    await harness.agent.delivery.deliver(MUM.uid, "first", Target(user_id=KID.uid))
    with pytest.raises(RateLimited):
        await harness.agent.delivery.deliver(
            MUM.uid,
            "Look",
            Target(user_id=KID.uid),
            attachments=[Requested(path, "image/png", len(png()))],
        )
    assert files.reads == []


# -- a file in a long conversation: read through the index -----------------------------------


async def archived_copy(harness: Harness) -> tuple[str, str]:
    """A direct conversation whose first message carries a photo, then 60 messages of
    3,000 characters: the photo's message is deep in the archive."""
    files = harness.fakes.files
    path = f"{MUM.uid}/uploads/upl_1/photo.png"
    await files.write(path, png(), "image/png")
    from shared.attachments.service import Requested

    delivery = harness.agent.delivery
    sent = await delivery.deliver(
        MUM.uid,
        "Look",
        Target(user_id=KID.uid),
        attachments=[Requested(path, "image/png", len(png()))],
    )
    for n in range(60):
        await delivery.deliver(MUM.uid, f"{n} " + "x" * 3000, Target(user_id=KID.uid))
    return sent.conversation_id, path + ".normalised.jpg"


def lenient(**settings: int) -> Harness:
    return make_service(
        ScriptedProvider([]),
        live_doc_bytes=16_384,
        history_messages=4,
        family_messages_per_minute=1000,
        **settings,
    )


async def test_a_file_lookup_reads_one_segment_however_many_there_are() -> None:
    """Seen failing before the index: each lookup read every segment (28 here)."""
    harness = lenient()
    await family(harness)
    conversation_id, normalised = await archived_copy(harness)
    store = harness.fakes.store
    held = await store.get(KID.uid, conversation_id)
    assert held is not None and held.archived is not None and held.archived.segments == 28
    url = f"/api/spark/agent/conversations/{conversation_id}/files"
    async with serving(api(harness)) as client:
        before = store.segment_reads
        got = await client.get(url, params={"path": normalised}, headers=auth(KID))
        assert got.status_code == 200 and got.content.startswith(b"\xff\xd8\xff")
        assert store.segment_reads - before == 1
        before = store.segment_reads
        missing = await client.get(url, params={"path": f"{MUM.uid}/x.png"}, headers=auth(KID))
        assert missing.status_code == 404
        assert store.segment_reads - before == 0


async def test_segments_archived_before_the_index_are_indexed_by_the_first_lookup() -> None:
    harness = lenient()
    await family(harness)
    conversation_id, normalised = await archived_copy(harness)
    store = harness.fakes.store
    store._files.clear()  # as archived before the index existed
    document = store._documents[(KID.uid, conversation_id)]
    document["archived"].pop("unindexed")
    segments = document["archived"]["segments"]
    url = f"/api/spark/agent/conversations/{conversation_id}/files"
    async with serving(api(harness)) as client:
        before = store.segment_reads
        got = await client.get(url, params={"path": normalised}, headers=auth(KID))
        assert got.status_code == 200
        assert store.segment_reads - before == segments  # once, to index them
        held = await store.get(KID.uid, conversation_id)
        assert held is not None and held.archived is not None
        assert held.archived.unindexed == 0
        before = store.segment_reads
        again = await client.get(url, params={"path": normalised}, headers=auth(KID))
        assert again.status_code == 200 and store.segment_reads - before == 1
        missing = await client.get(url, params={"path": f"{MUM.uid}/x.png"}, headers=auth(KID))
        assert missing.status_code == 404 and store.segment_reads - before == 1
