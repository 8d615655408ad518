"""Verbatim family messages on the in-memory stores (DESIGN §8): every copy, the author,
no model call, the idempotent retry, and the refusals that write nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.auth.base import User
from shared.errors import (
    IdempotencyKeyReused,
    MemberNotFound,
    NoFamily,
    NotFound,
    RequestError,
)
from shared.families.delivery import Delivered
from shared.families.messages import Target, direct_id, family_conversation_id, is_shared
from shared.llm.scripted import ScriptedProvider
from shared.schemas.documents import Conversation
from shared.store.memory import InMemoryFamilyStore
from tests.unit.helpers import Harness, make_service

MUM = User(uid="mum", name="Mum")
DAD = User(uid="dad", name="Dad")
KID = User(uid="kid", name="Sam")
EVE = User(uid="eve", name="Eve")


class World:
    """A family of two parents and a dependent, and an outsider in a family of her own."""

    def __init__(self, harness: Harness, family_id: str) -> None:
        self.harness = harness
        self.family_id = family_id

    @property
    def delivery(self) -> Any:
        return self.harness.agent.delivery

    async def copy(self, user: User, conversation_id: str) -> Conversation | None:
        return await self.harness.fakes.store.get(user.uid, conversation_id)

    def snapshot(self) -> tuple[Any, Any]:
        """Everything stored that a delivery could write."""
        store = self.harness.fakes.store
        families = self.families_store()
        return copy.deepcopy(store._documents), copy.deepcopy(families.documents)

    def families_store(self) -> InMemoryFamilyStore:
        found = self.harness.agent.families._store
        assert isinstance(found, InMemoryFamilyStore)
        return found


@pytest.fixture
async def world() -> World:
    harness = make_service(ScriptedProvider([]))
    families = harness.agent.families
    family = await families.create(MUM, "The Smiths")
    for user, role in ((DAD, "parent"), (KID, "dependent")):
        made = await families.invite(MUM.uid, family.id, role)  # type: ignore[arg-type]
        await families.join(user, made.token)
    await families.create(EVE, "Eve's")
    return World(harness, family.id)


async def test_a_direct_message_lands_in_both_copies_with_its_author(world: World) -> None:
    sent = await world.delivery.deliver(MUM.uid, "Dinner at six", Target(user_id=KID.uid))
    assert sent.conversation_id == direct_id(world.family_id, MUM.uid, KID.uid)
    assert sent.conversation_id == direct_id(world.family_id, KID.uid, MUM.uid)
    assert is_shared(sent.conversation_id)
    assert sent.recipients == [KID.uid]
    mine, theirs = (
        await world.copy(MUM, sent.conversation_id),
        await world.copy(KID, sent.conversation_id),
    )
    assert mine is not None and theirs is not None
    assert mine.messages == theirs.messages
    (message,) = theirs.messages
    assert message.id == sent.message_id
    assert message.text == "Dinner at six"
    assert message.author is not None
    assert message.author.to_firestore() == {
        "userId": "mum",
        "displayName": "Mum",
        "role": "parent",
    }
    assert message.via == "user"
    assert theirs.kind == "direct"
    assert theirs.family_id == world.family_id
    assert sorted(theirs.participant_ids) == ["kid", "mum"]
    assert theirs.active_run is None
    assert await world.copy(DAD, sent.conversation_id) is None

    # The reply goes into the same conversation, by target or by its id.
    back = await world.delivery.deliver(KID.uid, "OK!", Target(user_id=MUM.uid), via="agent")
    again = await world.delivery.deliver(
        KID.uid, "See you", Target(conversation_id=sent.conversation_id)
    )
    assert back.conversation_id == again.conversation_id == sent.conversation_id
    mine = await world.copy(MUM, sent.conversation_id)
    theirs = await world.copy(KID, sent.conversation_id)
    assert mine is not None and theirs is not None
    assert [m.text for m in mine.messages] == ["Dinner at six", "OK!", "See you"]
    assert mine.messages == theirs.messages
    assert mine.messages[1].via == "agent"


async def test_a_family_message_lands_in_every_members_copy(world: World) -> None:
    sent = await world.delivery.deliver(DAD.uid, "Holiday plans", Target(family=True))
    assert sent.conversation_id == family_conversation_id(world.family_id)
    assert sorted(sent.recipients) == ["kid", "mum"]
    copies = [await world.copy(u, sent.conversation_id) for u in (MUM, DAD, KID)]
    assert all(c is not None and c.kind == "family" for c in copies)
    assert len({repr([m.to_firestore() for m in c.messages]) for c in copies if c}) == 1
    assert await world.copy(EVE, sent.conversation_id) is None


async def test_a_retry_with_the_same_key_returns_the_first_answer(world: World) -> None:
    first = await world.delivery.deliver(
        MUM.uid, "Hello", Target(user_id=DAD.uid), idempotency_key="k-1"
    )
    before = world.snapshot()
    again = await world.delivery.deliver(
        MUM.uid, "Hello", Target(user_id=DAD.uid), idempotency_key="k-1"
    )
    assert again == Delivered(
        first.conversation_id, first.message_id, first.recipients, replayed=True
    )
    assert world.snapshot() == before
    with pytest.raises(IdempotencyKeyReused):
        await world.delivery.deliver(
            MUM.uid, "Something else", Target(user_id=DAD.uid), idempotency_key="k-1"
        )
    # The key is the sender's: another sender's same key is a new message.
    other = await world.delivery.deliver(
        DAD.uid, "Hello", Target(user_id=MUM.uid), idempotency_key="k-1"
    )
    assert other.message_id != first.message_id


@pytest.mark.parametrize(
    ("sender", "target", "error"),
    [
        (MUM, Target(user_id=EVE.uid), MemberNotFound),
        (MUM, Target(user_id="nobody"), MemberNotFound),
        (MUM, Target(user_id=MUM.uid), RequestError),
        (EVE, Target(user_id=MUM.uid), MemberNotFound),
        (User(uid="lonely"), Target(family=True), NoFamily),
        (MUM, Target(conversation_id="dm_unknown"), NotFound),
    ],
)
async def test_refusals_write_nothing(
    world: World, sender: User, target: Target, error: type[Exception]
) -> None:
    before = world.snapshot()
    with pytest.raises(error):
        await world.delivery.deliver(sender.uid, "psst", target, idempotency_key="k")
    assert world.snapshot() == before


async def test_a_former_member_keeps_history_and_gets_nothing_more(world: World) -> None:
    sent = await world.delivery.deliver(MUM.uid, "Before", Target(user_id=KID.uid))
    family = await world.delivery.deliver(MUM.uid, "All of you", Target(family=True))
    await world.harness.agent.families.remove(KID.uid, world.family_id, KID.uid)
    before = world.snapshot()
    for sender, target in (
        (MUM, Target(user_id=KID.uid)),
        (MUM, Target(conversation_id=sent.conversation_id)),
        (KID, Target(user_id=MUM.uid)),
        (KID, Target(conversation_id=sent.conversation_id)),
        (KID, Target(conversation_id=family.conversation_id)),
    ):
        with pytest.raises((MemberNotFound, NotFound, NoFamily)):
            await world.delivery.deliver(sender.uid, "After", target)
    assert world.snapshot() == before
    kept = await world.copy(KID, sent.conversation_id)
    assert kept is not None and [m.text for m in kept.messages] == ["Before"]
    after = await world.delivery.deliver(DAD.uid, "Still here", Target(family=True))
    assert sorted(after.recipients) == ["mum"]
    theirs = await world.copy(KID, family.conversation_id)
    assert theirs is not None and [m.text for m in theirs.messages] == ["All of you"]
