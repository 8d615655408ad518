"""Verbatim family messages on the in-memory stores (DESIGN §8): every copy, the author,
no model call, the idempotent retry, and the refusals that write nothing."""

from __future__ import annotations

import copy
import io
from datetime import UTC, datetime
from typing import Any

import pytest
from PIL import Image
from spark_http.app import ApiApp

from shared.attachments.service import Requested
from shared.audit import UserDocuments, shared_copies
from shared.auth.base import StaticTokenVerifier, User
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
from shared.schemas.documents import Conversation, Lesson
from shared.store.memory import InMemoryFamilyStore
from tests.unit.helpers import Harness, make_service, serving

MUM = User(uid="mum", name="Mum")
DAD = User(uid="dad", name="Dad")
KID = User(uid="kid", name="Sam")
EVE = User(uid="eve", name="Eve")
LONELY = User(uid="lonely")


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
        (LONELY, Target(family=True), NoFamily),
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


# -- through the api -----------------------------------------------------------------------


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (200, 10, 10)).save(out, "PNG")
    return out.getvalue()


def auth(user: User) -> dict[str, str]:
    return {"Authorization": f"Bearer {user.uid}-token"}


@pytest.fixture
async def client(world: World) -> Any:

    users = {f"{u.uid}-token": u for u in (MUM, DAD, KID, EVE, LONELY)}
    api = ApiApp(world.harness.agent, StaticTokenVerifier(users), world.harness.settings)
    async with serving(api) as served:
        yield served


MESSAGES = "/api/spark/agent/messages"


async def test_http_verbatim_message_is_201_and_a_retry_returns_the_first_answer(
    world: World, client: Any
) -> None:
    body = {"text": "Homework done?", "targetUserId": KID.uid}
    headers = {**auth(MUM), "Idempotency-Key": "retry-1", "Accept": "text/event-stream"}
    sent = await client.post(MESSAGES, headers=headers, json=body)
    assert sent.status_code == 201, sent.text
    answer = sent.json()
    assert set(answer) == {"conversationId", "messageId", "recipients"}
    assert answer["recipients"] == [KID.uid]
    before = world.snapshot()
    again = await client.post(MESSAGES, headers=headers, json=body)
    assert again.status_code == 201 and again.json() == answer
    assert again.headers["idempotent-replayed"] == "true"
    assert world.snapshot() == before
    reused = await client.post(MESSAGES, headers=headers, json={**body, "text": "Other"})
    assert (reused.status_code, reused.json()["error"]["code"]) == (422, "idempotency_key_reused")

    # The reply, by the conversation's id: the same conversation, no model call (the
    # scripted model has no step: a call would fail the test).
    reply = await client.post(
        MESSAGES,
        headers=auth(KID),
        json={"text": "Yes!", "conversationId": answer["conversationId"]},
    )
    assert reply.status_code == 201, reply.text
    assert reply.json()["conversationId"] == answer["conversationId"]
    family = await client.post(
        MESSAGES, headers=auth(DAD), json={"text": "Hi", "targetFamily": True}
    )
    assert family.status_code == 201 and sorted(family.json()["recipients"]) == ["kid", "mum"]


@pytest.mark.parametrize(
    ("user", "body", "headers", "status", "code"),
    [
        (MUM, {"targetUserId": EVE.uid}, {}, 404, "member_not_found"),
        (MUM, {"targetUserId": MUM.uid}, {}, 400, "invalid_request"),
        (EVE, {"targetFamily": True, "conversationId": "conv_1"}, {}, 400, "invalid_request"),
        (MUM, {"targetUserId": KID.uid, "targetFamily": True}, {}, 400, "invalid_request"),
        (MUM, {"conversationId": "dm_nothing"}, {}, 404, "not_found"),
        (MUM, {"targetFamily": True}, {"Idempotency-Key": "a b"}, 400, "invalid_request"),
    ],
)
async def test_http_refusals_write_nothing(
    world: World,
    client: Any,
    user: User,
    body: dict[str, Any],
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    before = world.snapshot()
    refused = await client.post(
        MESSAGES, headers={**auth(user), **headers}, json={"text": "psst", **body}
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (status, code), refused.text
    assert world.snapshot() == before


async def test_http_an_attachment_reaches_every_copy_and_each_member_can_read_it(
    world: World, client: Any
) -> None:
    files = world.harness.fakes.files
    path = f"{MUM.uid}/uploads/upl_1/photo.png"
    data = png()
    await files.write(path, data, "image/png")
    attachment = {"storagePath": path, "contentType": "image/png", "sizeBytes": len(data)}
    sent = await client.post(
        MESSAGES,
        headers=auth(MUM),
        json={"text": "Look", "targetFamily": True, "attachments": [attachment]},
    )
    assert sent.status_code == 201, sent.text
    conversation_id = sent.json()["conversationId"]
    parts = []
    for user in (MUM, DAD, KID):
        held = await world.copy(user, conversation_id)
        assert held is not None
        (message,) = held.messages
        parts.append(message.content[1].to_firestore())
    assert parts[0] == parts[1] == parts[2]
    normalised = parts[0]["file"]["storagePath"]
    assert normalised == path + ".normalised.jpg"
    for user in (DAD, KID):
        got = await client.get(
            f"/api/spark/agent/conversations/{conversation_id}/files",
            params={"path": normalised},
            headers=auth(user),
        )
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "image/jpeg"
        assert got.content.startswith(b"\xff\xd8\xff")
    # Nobody outside the conversation, and no path it does not name.
    eve = await client.get(
        f"/api/spark/agent/conversations/{conversation_id}/files",
        params={"path": normalised},
        headers=auth(EVE),
    )
    assert eve.status_code == 404
    other = await client.get(
        f"/api/spark/agent/conversations/{conversation_id}/files",
        params={"path": f"{MUM.uid}/uploads/upl_2/secret.png"},
        headers=auth(KID),
    )
    assert other.status_code == 404


async def test_a_refused_message_reads_no_attachment(world: World) -> None:
    files = world.harness.fakes.files
    path = f"{MUM.uid}/uploads/upl_1/photo.png"
    await files.write(path, png(), "image/png")
    with pytest.raises(MemberNotFound):
        await world.delivery.deliver(
            MUM.uid,
            "Look",
            Target(user_id=EVE.uid),
            attachments=[Requested(path, "image/png", len(png()))],
        )
    assert files.reads == []
    assert files.paths() == [path]


async def test_shared_conversations_roll_over_within_the_live_budget() -> None:
    harness = make_service(ScriptedProvider([]), live_doc_bytes=16_384, history_messages=4)
    families = harness.agent.families
    family = await families.create(MUM, "Smiths")
    made = await families.invite(MUM.uid, family.id, "dependent")
    await families.join(KID, made.token)
    text = "x" * 3000
    for _ in range(12):
        sent = await harness.agent.delivery.deliver(MUM.uid, text, Target(user_id=KID.uid))
    for user in (MUM, KID):
        size = harness.fakes.store.size(user.uid, sent.conversation_id)
        assert size is not None and size <= 16_384
        held = await harness.fakes.store.get(user.uid, sent.conversation_id)
        assert held is not None and held.archived is not None
        segments = await harness.fakes.store.segments(user.uid, sent.conversation_id)
        everything = [m for s in segments for m in s.messages] + list(held.messages)
        assert len(everything) == 12


async def test_http_progress_counts_each_members_blanks_for_members_only(
    world: World, client: Any
) -> None:
    body = (
        '<lesson><h1>Verbs</h1><exercise id="e1" type="fill-blanks"><p>I '
        '<blank answer="am" student-answer="am"/> here, you '
        '<blank answer="are" student-answer=""/> there, they '
        '<blank answer="are" student-answer=" "/>.</p></exercise></lesson>'
    )
    now = datetime(2026, 1, 2, tzinfo=UTC)
    lesson = Lesson(id="les_1", title="Verbs", body=body, version=1, created_at=now, updated_at=now)
    await world.harness.fakes.lessons.create(KID.uid, lesson)
    got = await client.get(f"/api/spark/families/{world.family_id}/progress", headers=auth(DAD))
    assert got.status_code == 200, got.text
    members = got.json()["members"]
    assert [m["userId"] for m in members] == ["mum", "dad", "kid"]
    assert members[2]["lessons"] == [
        {
            "lessonId": "les_1",
            "title": "Verbs",
            "updatedAt": "2026-01-02T00:00:00Z",
            "blanks": 3,
            "answered": 1,
        }
    ]
    assert members[0]["lessons"] == []
    for outsider in (EVE, LONELY):
        refused = await client.get(
            f"/api/spark/families/{world.family_id}/progress", headers=auth(outsider)
        )
        assert (refused.status_code, refused.json()["error"]["code"]) == (404, "family_not_found")


# -- the audit -----------------------------------------------------------------------------


async def documents_of(world: World, *users: User) -> list[UserDocuments]:
    """The users' conversations and archives as stored, as ``tools/audit.py`` reads them."""
    store = world.harness.fakes.store
    found = []
    for user in users:
        conversations = {
            cid: document for (uid, cid), document in store._documents.items() if uid == user.uid
        }
        archives = {
            cid: [s.to_firestore() for s in await store.segments(user.uid, cid)]
            for cid in conversations
        }
        found.append(UserDocuments(user.uid, None, conversations, archives))
    return found


async def test_audit_finds_a_copy_of_a_shared_message_that_differs(world: World) -> None:
    direct = await world.delivery.deliver(MUM.uid, "One", Target(user_id=KID.uid))
    family = await world.delivery.deliver(KID.uid, "Two", Target(family=True))
    everyone = await documents_of(world, MUM, DAD, KID)
    assert shared_copies(everyone) == []
    # Dad's copy of the family message says something else: found, named.
    stored = world.harness.fakes.store._documents[(DAD.uid, family.conversation_id)]
    stored["messages"][0]["content"][0]["text"] = "Tampered"
    found = shared_copies(await documents_of(world, MUM, DAD, KID))
    assert [(v.kind, v.user_id) for v in found] == [("shared_copy", DAD.uid)]
    assert family.message_id in found[0].detail
    # A message held twice in one copy is found too.
    kid = world.harness.fakes.store._documents[(KID.uid, direct.conversation_id)]
    kid["messages"].append(copy.deepcopy(kid["messages"][0]))
    twice = [v for v in shared_copies(await documents_of(world, MUM, KID)) if v.user_id == "kid"]
    assert [v.detail for v in twice] == [f"message {direct.message_id} is held 2 times"]


# -- what a message to family members may carry ---------------------------------------------

CLIP = {"storagePath": f"{MUM.uid}/uploads/upl_v/clip.webm"}


@pytest.mark.parametrize(
    "body",
    [
        {"voice": CLIP},  # no text at all: it would be delivered blank
        {"text": "psst", "voice": CLIP},
        {"text": "psst", "input": "voice", "voiceSessionId": "vs_1"},
        {"text": "psst", "documentId": "lesson_1"},
    ],
    ids=["voice-only", "voice", "input-voice", "documentId"],
)
@pytest.mark.parametrize("addressed", ["conversationId", "targetUserId", "targetFamily"])
async def test_http_a_family_message_with_a_clip_a_voice_input_or_a_document_is_400(
    world: World, client: Any, body: dict[str, Any], addressed: str
) -> None:
    first = await client.post(
        MESSAGES, headers=auth(MUM), json={"text": "Dinner", "targetUserId": KID.uid}
    )
    assert first.status_code == 201, first.text
    to: dict[str, Any] = {
        "conversationId": {"conversationId": first.json()["conversationId"]},
        "targetUserId": {"targetUserId": KID.uid},
        "targetFamily": {"targetFamily": True},
    }[addressed]
    before = world.snapshot()
    refused = await client.post(MESSAGES, headers=auth(MUM), json={**body, **to})
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_request"), (
        refused.text
    )
    assert world.snapshot() == before


async def test_http_when_busy_is_ignored_by_a_family_message(world: World, client: Any) -> None:
    """Deliberate (README): a delivery never waits for a reply, so there is nothing to be
    busy with; a client that always sends ``whenBusy`` still reaches the family."""
    sent = await client.post(
        MESSAGES,
        headers=auth(MUM),
        json={"text": "Dinner", "targetFamily": True, "whenBusy": "queue"},
    )
    assert sent.status_code == 201, sent.text
    copy_ = await world.copy(KID, sent.json()["conversationId"])
    assert copy_ is not None and [m.text for m in copy_.messages] == ["Dinner"]


async def test_http_an_idempotency_key_on_a_message_to_the_agent_is_400(
    world: World, client: Any
) -> None:
    """Only deliveries keep receipts: a key on a message to the agent would protect
    nothing, so it is refused rather than silently ignored (a retry would run twice)."""
    before = world.snapshot()
    refused = await client.post(
        MESSAGES,
        headers={**auth(MUM), "Idempotency-Key": "k-1"},
        json={"text": "Plan my week"},
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_request"), (
        refused.text
    )
    assert "Idempotency-Key" in refused.json()["error"]["message"]
    assert world.snapshot() == before


def test_audit_compares_archived_copies_of_shared_messages_too() -> None:
    """A copy that rolled over holds older messages in its counted archive segments:
    they are compared with the other copies (and counted once) as the live ones are; a
    segment past the marker's count (not yet committed) is not read."""
    one = {"id": "m1", "role": "user", "content": [{"type": "text", "text": "One"}]}
    two = {"id": "m2", "role": "user", "content": [{"type": "text", "text": "Two"}]}
    tampered = {**one, "content": [{"type": "text", "text": "Tampered"}]}

    def rolled(*segments: list[dict[str, Any]], live: list[dict[str, Any]]) -> UserDocuments:
        conversation = {"kind": "direct", "messages": live, "archived": {"segments": 1}}
        archives = {"dm_1": [{"messages": s} for s in segments]}
        return UserDocuments("mum", None, {"dm_1": conversation}, archives)

    kid = UserDocuments("kid", None, {"dm_1": {"kind": "direct", "messages": [one, two]}}, {})
    assert shared_copies([rolled([one], live=[two]), kid]) == []
    assert shared_copies([rolled([one], [tampered], live=[two]), kid]) == []  # uncounted
    found = shared_copies([rolled([tampered], live=[two]), kid])
    assert [(v.kind, v.user_id, v.detail) for v in found] == [
        ("shared_copy", "kid", "message m1 differs from mum's copy")
    ]
    twice = shared_copies([rolled([one], live=[one, two])])
    assert [v.detail for v in twice] == ["message m1 is held 2 times"]
