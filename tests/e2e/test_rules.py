"""firestore.rules, enforced by the Firestore emulator, with unsigned tokens for two users."""

from __future__ import annotations

import os
import secrets

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import PROJECT, unsigned_token

pytestmark = pytest.mark.emulator


@pytest.fixture
def owner_doc(db: firestore.Client) -> tuple[str, str]:
    uid, conversation_id = f"owner-{secrets.token_hex(4)}", "conv_rules"
    ref = (
        db.collection(uid).document("client").collection("conversations").document(conversation_id)
    )
    ref.set({"id": conversation_id, "participantIds": [uid], "messages": []})
    db.collection(uid).document("server").set({"secret": True})
    return uid, conversation_id


def rest(path: str) -> str:
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    return f"http://{host}/v1/projects/{PROJECT}/databases/(default)/documents/{path}"


def as_user(uid: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {unsigned_token(uid)}"} if uid else {}


def test_rules_owner_can_read_own_conversation(owner_doc: tuple[str, str]) -> None:
    uid, conversation_id = owner_doc
    response = httpx.get(
        rest(f"{uid}/client/conversations/{conversation_id}"), headers=as_user(uid)
    )
    assert response.status_code == 200
    assert response.json()["fields"]["id"]["stringValue"] == conversation_id
    listing = httpx.get(rest(f"{uid}/client/conversations"), headers=as_user(uid))
    assert listing.status_code == 200


@pytest.mark.parametrize("reader", ["other-user", None])
def test_rules_others_and_anonymous_cannot_read(
    owner_doc: tuple[str, str], reader: str | None
) -> None:
    uid, conversation_id = owner_doc
    response = httpx.get(
        rest(f"{uid}/client/conversations/{conversation_id}"), headers=as_user(reader)
    )
    assert response.status_code == 403


def test_rules_server_only_data_is_unreadable_even_by_its_user(
    owner_doc: tuple[str, str], db: firestore.Client
) -> None:
    uid, _ = owner_doc
    assert httpx.get(rest(f"{uid}/server"), headers=as_user(uid)).status_code == 403
    # What the user's model was given of other people's messages (the egress's record).
    given = db.document(uid, "server", "provenance", "current", "given", "m1")
    given.set({"authorId": "dad", "text": "Dinner at seven."})
    db.document(uid, "server", "provenance", "current").set({"authors": ["dad"]})
    for path in ("server/provenance/current", "server/provenance/current/given/m1"):
        assert httpx.get(rest(f"{uid}/{path}"), headers=as_user(uid)).status_code == 403


@pytest.mark.parametrize("writer", ["owner", "other-user", None])
def test_rules_every_client_write_is_denied(
    owner_doc: tuple[str, str], writer: str | None, db: firestore.Client
) -> None:
    uid, conversation_id = owner_doc
    who = uid if writer == "owner" else writer
    doc = rest(f"{uid}/client/conversations/{conversation_id}")
    body = {"fields": {"id": {"stringValue": "hijacked"}}}
    assert httpx.patch(doc, json=body, headers=as_user(who)).status_code == 403
    assert httpx.delete(doc, headers=as_user(who)).status_code == 403
    created = httpx.post(
        rest(f"{uid}/client/conversations") + "?documentId=new", json=body, headers=as_user(who)
    )
    assert created.status_code == 403
    stored = (
        db.collection(uid).document("client").collection("conversations").document(conversation_id)
    )
    assert stored.get().to_dict()["id"] == conversation_id


def test_rules_owner_reads_the_in_flight_message_beside_the_finished_ones(
    db: firestore.Client,
) -> None:
    """Clients render ``messages`` then ``activeRun.message``: both come with one read."""
    uid, conversation_id = f"owner-{secrets.token_hex(4)}", "conv_streaming"
    ref = (
        db.collection(uid).document("client").collection("conversations").document(conversation_id)
    )
    streaming = {"id": "m2", "role": "assistant", "status": "streaming", "content": []}
    streaming["content"] = [{"type": "text", "text": "Half a rep"}]
    ref.set(
        {
            "id": conversation_id,
            "participantIds": [uid],
            "messages": [{"id": "m1", "role": "user", "status": "complete", "content": []}],
            "activeRun": {"runId": "run_1", "status": "streaming", "message": streaming},
        }
    )
    response = httpx.get(
        rest(f"{uid}/client/conversations/{conversation_id}"), headers=as_user(uid)
    )
    assert response.status_code == 200
    fields = response.json()["fields"]
    run = fields["activeRun"]["mapValue"]["fields"]
    message = run["message"]["mapValue"]["fields"]
    assert message["status"]["stringValue"] == "streaming"
    part = message["content"]["arrayValue"]["values"][0]["mapValue"]["fields"]
    assert part["text"]["stringValue"] == "Half a rep"
    assert len(fields["messages"]["arrayValue"]["values"]) == 1
    other = httpx.get(
        rest(f"{uid}/client/conversations/{conversation_id}"), headers=as_user("someone-else")
    )
    assert other.status_code == 403


def test_rules_owner_reads_a_lessons_kept_versions_and_nobody_writes_them(
    db: firestore.Client,
) -> None:
    """Kept versions sit under the lesson (``versions/{n}``): readable like it, by its
    owner only, even after the lesson itself was deleted."""
    uid = f"owner-{secrets.token_hex(4)}"
    lessons = db.collection(uid).document("client").collection("lessons")
    lessons.document("les_1").collection("versions").document("000001").set(
        {"id": "les_1", "title": "Tides", "body": "<lesson/>", "version": 1, "characters": 9}
    )
    path = f"{uid}/client/lessons/les_1/versions/000001"
    response = httpx.get(rest(path), headers=as_user(uid))
    assert response.status_code == 200
    assert response.json()["fields"]["version"]["integerValue"] == "1"
    listing = httpx.get(rest(f"{uid}/client/lessons/les_1/versions"), headers=as_user(uid))
    assert listing.status_code == 200 and len(listing.json()["documents"]) == 1
    for reader in ("someone-else", None):
        assert httpx.get(rest(path), headers=as_user(reader)).status_code == 403
    body = {"fields": {"body": {"stringValue": "<lesson><p>forged</p></lesson>"}}}
    assert httpx.patch(rest(path), json=body, headers=as_user(uid)).status_code == 403
    assert httpx.delete(rest(path), headers=as_user(uid)).status_code == 403


@pytest.fixture
def family_docs(db: firestore.Client) -> tuple[str, str, str]:
    """A family of two (its truth, an invite, the token index, each member's membership
    and mirror), written as the functions write them."""
    mum, kid = f"mum-{secrets.token_hex(4)}", f"kid-{secrets.token_hex(4)}"
    family_id, hashed = f"fam_{secrets.token_hex(4)}", secrets.token_hex(32)
    members = [{"userId": mum, "role": "parent"}, {"userId": kid, "role": "dependent"}]
    db.document("families", family_id).set({"id": family_id, "members": members})
    db.document("families", family_id, "invites", "inv_1").set({"tokenHash": hashed})
    db.document("inviteTokens", hashed).set({"familyId": family_id, "inviteId": "inv_1"})
    for uid, role in ((mum, "parent"), (kid, "dependent")):
        db.document(uid, "client", "family", "current").set(
            {"familyId": family_id, "myRole": role, "members": members}
        )
        db.document(uid, "server", "family", "membership").set({"familyId": family_id})
    return mum, kid, family_id


def test_rules_each_member_reads_only_their_own_family_mirror(
    family_docs: tuple[str, str, str],
) -> None:
    mum, kid, family_id = family_docs
    for uid in (mum, kid):
        own = httpx.get(rest(f"{uid}/client/family/current"), headers=as_user(uid))
        assert own.status_code == 200
        assert own.json()["fields"]["familyId"]["stringValue"] == family_id
    # Not another member's, not an outsider's, not anonymously.
    for reader, owner in ((mum, kid), (kid, mum), ("outsider", mum), (None, kid)):
        other = httpx.get(rest(f"{owner}/client/family/current"), headers=as_user(reader))
        assert other.status_code == 403, (reader, owner)


@pytest.mark.parametrize("reader", ["mum", "kid", "outsider", "families", None])
def test_rules_the_family_truth_invites_and_tokens_are_server_only(
    family_docs: tuple[str, str, str], reader: str | None
) -> None:
    """Nobody reads /families/**, /inviteTokens/** or anyone's membership: not its
    members, not a user whose uid happens to be "families"."""
    mum, kid, family_id = family_docs
    who = {"mum": mum, "kid": kid}.get(reader or "", reader)
    for path in (
        f"families/{family_id}",
        f"families/{family_id}/invites/inv_1",
        f"families/{family_id}/invites",
        "families",
        "inviteTokens",
        f"{mum}/server/family/membership",
        f"{kid}/server/family/membership",
    ):
        assert httpx.get(rest(path), headers=as_user(who)).status_code == 403, (who, path)
    body = {"fields": {"name": {"stringValue": "hijacked"}}}
    assert (
        httpx.patch(rest(f"families/{family_id}"), json=body, headers=as_user(who)).status_code
        == 403
    )
    mirror = rest(f"{mum}/client/family/current")
    assert httpx.patch(mirror, json=body, headers=as_user(who)).status_code == 403
    assert httpx.delete(mirror, headers=as_user(who)).status_code == 403


def test_rules_owner_reads_task_sections_and_nobody_writes_them(db: firestore.Client) -> None:
    """A task's section (``/{uid}/client/tasks/{taskId}``) is its owner's to read, and
    to list; nobody writes it but the functions."""
    uid = f"owner-{secrets.token_hex(4)}"
    tasks = db.collection(uid).document("client").collection("tasks")
    tasks.document("task_1").set({"id": "task_1", "status": "running", "title": "Creating lesson"})
    path = f"{uid}/client/tasks/task_1"
    response = httpx.get(rest(path), headers=as_user(uid))
    assert response.status_code == 200
    assert response.json()["fields"]["status"]["stringValue"] == "running"
    listing = httpx.get(rest(f"{uid}/client/tasks"), headers=as_user(uid))
    assert listing.status_code == 200 and len(listing.json()["documents"]) == 1
    for reader in ("someone-else", None):
        assert httpx.get(rest(path), headers=as_user(reader)).status_code == 403
    body = {"fields": {"status": {"stringValue": "completed"}}}
    assert httpx.patch(rest(path), json=body, headers=as_user(uid)).status_code == 403
    assert httpx.delete(rest(path), headers=as_user(uid)).status_code == 403


def test_rules_what_the_server_keeps_for_its_answers_is_server_only(db: firestore.Client) -> None:
    """Issue 34's documents: a user's lesson progress summary, the count of their family
    messages, and the index of their archived files are the functions' alone (the
    owner included; nobody writes them)."""
    uid, key = f"owner-{secrets.token_hex(4)}", secrets.token_hex(32)
    paths = (
        f"{uid}/server/progress/lessons",
        f"{uid}/server/family/sent",
        f"{uid}/server/archivedFiles/{key}",
    )
    for path in paths:
        db.document(path).set({"written": True})
    for path in paths:
        for reader in (uid, "someone-else", None):
            assert httpx.get(rest(path), headers=as_user(reader)).status_code == 403, (reader, path)
        body = {"fields": {"written": {"booleanValue": False}}}
        assert httpx.patch(rest(path), json=body, headers=as_user(uid)).status_code == 403
    listing = httpx.get(rest(f"{uid}/server/archivedFiles"), headers=as_user(uid))
    assert listing.status_code == 403


@pytest.mark.parametrize("reader", ["erased", "someone-else", "deletions", None])
def test_rules_deletion_records_are_server_only(db: firestore.Client, reader: str | None) -> None:
    """An erasure's record (``/deletions/{id}``, DESIGN §15) is the functions' alone:
    not the erased user's, not a user whose uid happens to be "deletions"."""
    deletion_id = f"del_{secrets.token_hex(8)}"
    db.document("deletions", deletion_id).set({"id": deletion_id, "uidHash": "0" * 64})
    for path in (f"deletions/{deletion_id}", "deletions"):
        assert httpx.get(rest(path), headers=as_user(reader)).status_code == 403, (reader, path)
    body = {"fields": {"step": {"stringValue": "finished"}}}
    patched = httpx.patch(rest(f"deletions/{deletion_id}"), json=body, headers=as_user(reader))
    assert patched.status_code == 403
