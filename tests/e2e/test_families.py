"""Families end to end (DESIGN §8): Auth-emulator users calling the real api (two
processes behind a proxy) on the Firestore emulator, checked in Firestore after each
step: every member's mirror matches the family, nobody else has one, and the rules let
each member read only their own."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from google.cloud import firestore
from spark_http.app import ROUTES

from shared.families.audit import family_violations
from shared.schemas.server import Family
from tests.e2e.conftest import PROJECT, Functions, StackUser, new_user

pytestmark = pytest.mark.emulator

FAMILIES = "/api/spark/families"


@dataclass
class Household:
    """Four people: two parents, a dependent and an outsider."""

    mum: StackUser
    dad: StackUser
    kid: StackUser
    eve: StackUser

    @property
    def everyone(self) -> list[StackUser]:
        return [self.mum, self.dad, self.kid, self.eve]


@pytest.fixture
def people(emulators: tuple[str, str]) -> Household:
    return Household(*(new_user(emulators[1]) for _ in range(4)))


@pytest.fixture
def api(functions: Functions) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=functions.api, timeout=60) as client:
        yield client


def as_(user: StackUser) -> dict[str, str]:
    return {"Authorization": f"Bearer {user.token}"}


def code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def mirror(db: firestore.Client, user: StackUser) -> dict[str, Any] | None:
    return db.document(user.uid, "client", "family", "current").get().to_dict()


def check(
    db: firestore.Client, family_id: str, roles: dict[str, str], people: list[StackUser]
) -> None:
    """The family in Firestore has exactly ``roles`` (uid → role), every member's mirror
    matches it, nobody else's names it, and the memberships agree (the audit)."""
    stored = db.document("families", family_id).get().to_dict()
    if roles:
        assert stored is not None
        family = Family.model_validate(stored)
        assert {m.user_id: m.role for m in family.members} == roles
    else:
        assert stored is None
    for user in people:
        seen = mirror(db, user)
        if user.uid in roles:
            assert seen is not None and seen["myRole"] == roles[user.uid], user.uid
        else:
            assert seen is None or seen["familyId"] != family_id, user.uid
    assert (
        family_violations(
            stored,
            {u.uid: mirror(db, u) for u in people},
            {
                u.uid: db.document(u.uid, "server", "family", "membership").get().to_dict()
                for u in people
            },
            family_id=family_id,
        )
        == []
    )


def invite(
    api: httpx.Client, user: StackUser, family_id: str, role: str, **options: int
) -> dict[str, Any]:
    response = api.post(
        f"{FAMILIES}/{family_id}/invites", headers=as_(user), json={"role": role, **options}
    )
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def join(api: httpx.Client, user: StackUser, token: str, **body: str) -> httpx.Response:
    return api.post(f"{FAMILIES}/join", headers=as_(user), json={"token": token, **body})


def documents_under(db: firestore.Client, roots: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every document in the collections ``roots`` and beneath them, by path (walked
    recursively: a document may have subcollections even when it does not exist).

    Not the whole database: on the emulator the walk costs ~10 ms a document (1,200
    took 11.6 s), and a full test run leaves thousands from other tests. The roots
    are everything the api writes for a family and everything of the people in it."""
    pending = [db.collection(root) for root in roots]
    while pending:
        collection = pending.pop()
        for snapshot in collection.stream():
            yield snapshot.reference.path, snapshot.to_dict() or {}
        for ref in collection.list_documents():
            pending.extend(ref.collections())


def assert_no_token(db: firestore.Client, people: list[StackUser], tokens: list[str]) -> int:
    """No document holds a raw token: not the families' documents, not anyone's of
    ``people``; how many documents were read."""
    roots = ["families", "inviteTokens", *(u.uid for u in people)]
    scanned = list(documents_under(db, roots))
    for path, document in scanned:
        stored = json.dumps(document, default=str)
        assert not any(token in stored for token in tokens), path
    return len(scanned)


def rest(path: str) -> str:
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    return f"http://{host}/v1/projects/{PROJECT}/databases/(default)/documents/{path}"


def test_e2e_family_create_invite_join_roles_refusals_and_leaving(
    api: httpx.Client, db: firestore.Client, people: Household
) -> None:
    mum, dad, kid, eve = people.mum, people.dad, people.kid, people.eve
    everyone = people.everyone
    tokens: list[str] = []

    # Create: Mum is its parent; one family per user.
    assert code(api.get(f"{FAMILIES}/current", headers=as_(mum))) == (404, "no_family")
    created = api.post(FAMILIES, headers=as_(mum), json={"name": "The Smiths"})
    assert created.status_code == 201, created.text
    family = created.json()["family"]
    fid = family["id"]
    assert family["members"][0]["displayName"] == mum.email.partition("@")[0]
    check(db, fid, {mum.uid: "parent"}, everyone)
    assert code(api.post(FAMILIES, headers=as_(mum), json={"name": "Again"})) == (
        409,
        "already_in_family",
    )

    # Invite as each role; join with the link's role and a chosen name.
    for_dad = invite(api, mum, fid, "parent")
    tokens.append(for_dad["token"])
    assert for_dad["link"].endswith(f"/join?token={for_dad['token']}")
    joined = join(api, dad, for_dad["token"], displayName="Dad")
    assert joined.status_code == 200, joined.text
    assert [m["displayName"] for m in joined.json()["family"]["members"]] == [
        mum.email.partition("@")[0],
        "Dad",
    ]
    check(db, fid, {mum.uid: "parent", dad.uid: "parent"}, everyone)
    for_kid = invite(api, dad, fid, "dependent", maxUses=1, expiresInHours=1)
    tokens.append(for_kid["token"])
    assert join(api, kid, for_kid["token"]).status_code == 200
    roles = {mum.uid: "parent", dad.uid: "parent", kid.uid: "dependent"}
    check(db, fid, roles, everyone)
    assert mirror(db, kid)["members"] == mirror(db, mum)["members"]  # type: ignore[index]

    # Refused links, each with its own code; nothing changes.
    assert code(join(api, eve, for_kid["token"])) == (410, "invite_used_up")
    forged = for_kid["token"][:-2] + ("AA" if for_kid["token"][-2:] != "AA" else "BB")
    assert code(join(api, eve, forged)) == (404, "invite_not_found")
    revoked = invite(api, mum, fid, "dependent")
    tokens.append(revoked["token"])
    gone = api.delete(f"{FAMILIES}/{fid}/invites/{revoked['invite']['id']}", headers=as_(dad))
    assert gone.status_code == 204
    refused = join(api, eve, revoked["token"])
    assert code(refused) == (410, "invite_revoked")
    assert "new" in refused.json()["error"]["message"]
    expired = invite(api, mum, fid, "dependent")
    tokens.append(expired["token"])
    db.document("families", fid, "invites", expired["invite"]["id"]).update(
        {"expiresAt": datetime.now(UTC) - timedelta(seconds=1)}  # its hour has passed
    )
    assert code(join(api, eve, expired["token"])) == (410, "invite_expired")
    check(db, fid, roles, everyone)
    listed = api.get(f"{FAMILIES}/{fid}/invites", headers=as_(mum)).json()["invites"]
    assert [i["status"] for i in listed] == ["expired", "revoked", "used_up", "used_up"]

    # Everything a dependent may not do (403), and an outsider (404, never 403).
    open_link = invite(api, mum, fid, "parent", maxUses=3)
    tokens.append(open_link["token"])
    link_id = open_link["invite"]["id"]
    forbidden = {
        "invite": lambda u: api.post(
            f"{FAMILIES}/{fid}/invites", headers=as_(u), json={"role": "parent"}
        ),
        "list": lambda u: api.get(f"{FAMILIES}/{fid}/invites", headers=as_(u)),
        "revoke": lambda u: api.delete(f"{FAMILIES}/{fid}/invites/{link_id}", headers=as_(u)),
        "promote": lambda u: api.patch(
            f"{FAMILIES}/{fid}/members/{kid.uid}", headers=as_(u), json={"role": "parent"}
        ),
        "demote": lambda u: api.patch(
            f"{FAMILIES}/{fid}/members/{dad.uid}", headers=as_(u), json={"role": "dependent"}
        ),
        "remove": lambda u: api.delete(f"{FAMILIES}/{fid}/members/{dad.uid}", headers=as_(u)),
    }
    for name, attempt in forbidden.items():
        assert code(attempt(kid)) == (403, "parent_only"), name
        assert code(attempt(eve)) == (404, "family_not_found"), name
    assert code(api.get(f"{FAMILIES}/current", headers=as_(eve))) == (404, "no_family")
    assert code(api.delete(f"{FAMILIES}/{fid}/members/{eve.uid}", headers=as_(eve))) == (
        404,
        "family_not_found",
    )
    check(db, fid, roles, everyone)
    current = api.get(f"{FAMILIES}/current", headers=as_(kid))
    assert current.status_code == 200 and current.json()["family"]["id"] == fid

    # The last parent: demoting the other parent is fine; the last one stays a parent.
    demoted = api.patch(
        f"{FAMILIES}/{fid}/members/{dad.uid}", headers=as_(mum), json={"role": "dependent"}
    )
    assert demoted.status_code == 200
    roles[dad.uid] = "dependent"
    check(db, fid, roles, everyone)
    assert code(
        api.patch(
            f"{FAMILIES}/{fid}/members/{mum.uid}", headers=as_(mum), json={"role": "dependent"}
        )
    ) == (409, "last_parent")
    assert code(api.delete(f"{FAMILIES}/{fid}/members/{mum.uid}", headers=as_(mum))) == (
        409,
        "last_parent",
    )
    check(db, fid, roles, everyone)
    promoted = api.patch(
        f"{FAMILIES}/{fid}/members/{dad.uid}", headers=as_(mum), json={"role": "parent"}
    )
    assert promoted.status_code == 200
    roles[dad.uid] = "parent"

    # Leaving: a dependent leaves; a parent leaves while another remains; a parent
    # removes someone; the last member leaving takes the family and its invites away.
    assert api.delete(f"{FAMILIES}/{fid}/members/{kid.uid}", headers=as_(kid)).status_code == 204
    del roles[kid.uid]
    check(db, fid, roles, everyone)
    assert mirror(db, kid) is None
    assert join(api, kid, open_link["token"]).status_code == 200  # back, as a parent
    roles[kid.uid] = "parent"
    check(db, fid, roles, everyone)
    assert api.delete(f"{FAMILIES}/{fid}/members/{mum.uid}", headers=as_(mum)).status_code == 204
    del roles[mum.uid]
    check(db, fid, roles, everyone)
    assert api.delete(f"{FAMILIES}/{fid}/members/{kid.uid}", headers=as_(dad)).status_code == 204
    del roles[kid.uid]
    check(db, fid, roles, everyone)
    hashes = [
        d["tokenHash"]
        for d in (s.to_dict() for s in db.collection("families", fid, "invites").stream())
        if d
    ]
    assert len(hashes) == 5
    # While the family and its five invites exist: the tokens are nowhere in Firestore.
    assert assert_no_token(db, everyone, tokens) >= 5 + 5 + 4 + 1
    assert api.delete(f"{FAMILIES}/{fid}/members/{dad.uid}", headers=as_(dad)).status_code == 204
    check(db, fid, {}, everyone)
    assert list(db.collection("families", fid, "invites").stream()) == []
    assert all(db.document("inviteTokens", h).get().to_dict() is None for h in hashes)
    assert code(join(api, eve, open_link["token"])) == (404, "invite_not_found")


def test_e2e_five_people_racing_for_the_last_use_one_joins(
    api: httpx.Client, db: firestore.Client, people: Household, emulators: tuple[str, str]
) -> None:
    family = api.post(FAMILIES, headers=as_(people.mum), json={"name": "Racers"}).json()["family"]
    made = invite(api, people.mum, family["id"], "dependent", maxUses=2)
    assert join(api, people.kid, made["token"]).status_code == 200  # one use left
    racers = [new_user(emulators[1]) for _ in range(5)]
    with ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(lambda u: join(api, u, made["token"]), racers))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 410, 410, 410, 410], [a.text for a in answers]
    assert {code(a) for a in answers if a.status_code == 410} == {(410, "invite_used_up")}
    winner = next(u for u, a in zip(racers, answers, strict=True) if a.status_code == 200)
    roles = {people.mum.uid: "parent", people.kid.uid: "dependent", winner.uid: "dependent"}
    check(db, family["id"], roles, [*people.everyone, *racers])


def test_e2e_join_attempts_past_the_hourly_allowance_are_429(
    api: httpx.Client, emulators: tuple[str, str]
) -> None:
    """SPARK_FAMILY_JOINS_PER_HOUR (10): a guesser is stopped, forged tokens counting."""
    guesser = new_user(emulators[1])
    for n in range(10):
        assert code(join(api, guesser, f"guess-{n}")) == (404, "invite_not_found")
    limited = join(api, guesser, "guess-10")
    assert code(limited) == (429, "rate_limited")
    assert 3000 < int(limited.headers["retry-after"]) <= 3600


def test_e2e_rules_let_each_member_read_only_their_own_documents(
    api: httpx.Client, people: Household
) -> None:
    mum, dad, kid, eve = people.mum, people.dad, people.kid, people.eve
    fid = api.post(FAMILIES, headers=as_(mum), json={"name": "Rules"}).json()["family"]["id"]
    for user, role in ((dad, "parent"), (kid, "dependent")):
        assert join(api, user, invite(api, mum, fid, role)["token"]).status_code == 200
    members = [mum, dad, kid]
    for reader in people.everyone:
        for owner in members:
            response = httpx.get(rest(f"{owner.uid}/client/family/current"), headers=as_(reader))
            assert response.status_code == (200 if reader is owner else 403), (reader, owner)
            for other in (f"{owner.uid}/server/family/membership", f"{owner.uid}/server"):
                assert httpx.get(rest(other), headers=as_(reader)).status_code == 403
        for path in (f"families/{fid}", f"families/{fid}/invites", "inviteTokens"):
            assert httpx.get(rest(path), headers=as_(reader)).status_code == 403, path
    own = httpx.get(rest(f"{kid.uid}/client/family/current"), headers=as_(kid)).json()
    assert own["fields"]["myRole"]["stringValue"] == "dependent"
    assert eve.uid not in json.dumps(own)


RESERVED = "__x__"
# A body each route with a body takes (a wrong one would be refused before the id is),
# and a query one needs, by endpoint.
BODIES: dict[str, dict[str, Any]] = {
    "create_invite": {"role": "parent"},
    "set_role": {"role": "parent"},
    "answers": {"toolCallId": "call_1", "answers": {"0": "Yes"}},
    "approvals": {"toolCallId": "call_1", "approved": True},
    "tool_results": {"toolCallId": "call_1", "output": 1, "status": "ok"},
    "speech": {"messageId": "msg_1"},
    "restore_lesson": {"version": 1},
}
QUERIES = {"conversation_file": "?path=x/uploads/a.png"}
_PARAM = re.compile(r"{(\w+)(?::\w+)?}")


def id_routes(ids: dict[str, str]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every route with an id in its path, each with ``RESERVED`` in one of its id slots
    and the real ``ids`` (by parameter) in the others: (method, path, JSON body). The
    routes are the api's own list, so a new one is tried too (and a new kind of id fails
    here until it is given a real one)."""
    routes: list[tuple[str, str, dict[str, Any]]] = []
    for route in ROUTES:
        template, method, name = route.path, route.method, route.endpoint.__name__
        for param in _PARAM.findall(template):
            path = _PARAM.sub(lambda m, p=param: RESERVED if m[1] == p else ids[m[1]], template)
            routes.append((method, path + QUERIES.get(name, ""), BODIES.get(name, {})))
    tried = {path.split("?")[0].rsplit("/", 1)[-1] for _, path, _ in routes}
    assert {"stream", "files", "speech", "restore", "progress", "cancel"} <= tried
    return routes


def test_e2e_a_reserved_id_in_any_path_is_404_json_never_5xx(
    api: httpx.Client, people: Household
) -> None:
    """Firestore reserves ids of the form ``__x__`` (using one is an error there): every
    route with an id in its path answers 404 JSON for one, whoever asks (a parent, a
    dependent, an outsider), and the family is unchanged."""
    mum, kid = people.mum, people.kid
    fid = api.post(FAMILIES, headers=as_(mum), json={"name": "Reserved"}).json()["family"]["id"]
    assert join(api, kid, invite(api, mum, fid, "dependent")["token"]).status_code == 200
    link_id = invite(api, mum, fid, "parent")["invite"]["id"]
    ids = {
        "family_id": fid,
        "invite_id": link_id,
        "member_id": kid.uid,
        "task_id": "task_1",
        "message_id": "msg_1",
        "conversation_id": "conv_1",
    }
    answers: dict[str, tuple[int, str]] = {}
    for caller in (mum, kid, people.eve):
        for method, path, body in id_routes(ids):
            response = api.request(method, path, headers=as_(caller), json=body or None)
            error = response.json().get("error", {}) if response.content else {}
            answers[f"{method} {path} {json.dumps(body)} as {caller.email}"] = (
                response.status_code,
                error.get("code"),
            )
    # Ids in a message's body are judged the same way (none is made a path either).
    for body in (
        {"conversationId": RESERVED},
        {"documentId": RESERVED},
        {"input": "voice", "voiceSessionId": RESERVED},
        {"targetUserId": RESERVED},
    ):
        sent = api.post("/api/spark/agent/messages", headers=as_(mum), json={"text": "hi", **body})
        answers[f"POST /api/spark/agent/messages {json.dumps(body)}"] = (
            sent.status_code,
            sent.json().get("error", {}).get("code"),
        )
    wrong = {
        route: answer for route, answer in answers.items() if answer[0] != 404 or not answer[1]
    }
    assert not wrong, "\n".join(f"{route}: {answer}" for route, answer in wrong.items())
    family = api.get(f"{FAMILIES}/current", headers=as_(mum)).json()["family"]
    assert [m["userId"] for m in family["members"]] == [mum.uid, kid.uid]
