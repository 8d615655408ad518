"""The family routes through the real functions-framework app, on fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from spark_http.app import ApiApp

from shared.auth.base import StaticTokenVerifier, User
from shared.llm.scripted import ScriptedProvider
from tests.unit.helpers import make_service, serving

USERS = {
    "mum": User(uid="mum", name="Mum"),
    "sam": User(uid="sam", email="sam@example.com"),
    "eve": User(uid="eve", name="Eve"),
}
FAMILIES = "/api/spark/families"


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {name}-token"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    harness = make_service(ScriptedProvider([]), family_joins_per_hour=3)
    verifier = StaticTokenVerifier({f"{k}-token": v for k, v in USERS.items()})
    async with serving(ApiApp(harness.agent, verifier, harness.settings)) as client:
        yield client


async def test_http_create_invite_join_change_role_and_leave(client: httpx.AsyncClient) -> None:
    created = await client.post(FAMILIES, headers=auth("mum"), json={"name": "The Smiths"})
    assert created.status_code == 201, created.text
    family = created.json()["family"]
    assert family["name"] == "The Smiths"
    assert [(m["userId"], m["displayName"], m["role"]) for m in family["members"]] == [
        ("mum", "Mum", "parent")
    ]
    assert set(family) == {"id", "name", "members", "createdAt"}
    invites = f"{FAMILIES}/{family['id']}/invites"
    made = await client.post(invites, headers=auth("mum"), json={"role": "dependent"})
    assert made.status_code == 201, made.text
    assert made.headers["cache-control"] == "no-store"
    body = made.json()
    assert body["link"] == f"http://127.0.0.1:5173/join?token={body['token']}"
    assert {k: body["invite"][k] for k in ("role", "maxUses", "uses", "status")} == {
        "role": "dependent",
        "maxUses": 1,
        "uses": 0,
        "status": "active",
    }
    joined = await client.post(
        f"{FAMILIES}/join", headers=auth("sam"), json={"token": body["token"]}
    )
    assert joined.status_code == 200, joined.text
    members = joined.json()["family"]["members"]
    assert [(m["userId"], m["displayName"], m["role"]) for m in members][1] == (
        "sam",
        "sam",
        "dependent",
    )
    listed = await client.get(invites, headers=auth("mum"))
    assert listed.status_code == 200
    assert [(i["uses"], i["status"]) for i in listed.json()["invites"]] == [(1, "used_up")]
    assert "token" not in listed.text and body["token"] not in listed.text
    promoted = await client.patch(
        f"{FAMILIES}/{family['id']}/members/sam", headers=auth("mum"), json={"role": "parent"}
    )
    assert promoted.status_code == 200
    assert promoted.json()["family"]["members"][1]["role"] == "parent"
    current = await client.get(f"{FAMILIES}/current", headers=auth("sam"))
    assert current.json() == promoted.json()
    left = await client.delete(f"{FAMILIES}/{family['id']}/members/sam", headers=auth("sam"))
    assert left.status_code == 204 and left.content == b""
    gone = await client.get(f"{FAMILIES}/current", headers=auth("sam"))
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "no_family"


async def test_http_a_member_renames_themself_and_no_one_else(client: httpx.AsyncClient) -> None:
    created = await client.post(FAMILIES, headers=auth("mum"), json={"name": "The Smiths"})
    family_id = created.json()["family"]["id"]
    made = await client.post(
        f"{FAMILIES}/{family_id}/invites", headers=auth("mum"), json={"role": "dependent"}
    )
    token = made.json()["token"]
    await client.post(f"{FAMILIES}/join", headers=auth("sam"), json={"token": token})
    name = f"{FAMILIES}/{family_id}/members/sam/name"
    renamed = await client.put(name, headers=auth("sam"), json={"displayName": "  Sammy  "})
    assert renamed.status_code == 200, renamed.text
    members = renamed.json()["family"]["members"]
    assert [(m["userId"], m["displayName"]) for m in members] == [("mum", "Mum"), ("sam", "Sammy")]
    current = await client.get(f"{FAMILIES}/current", headers=auth("mum"))
    assert current.json() == renamed.json()
    # A parent cannot rename anyone else; nor can a blank name be chosen.
    theirs = await client.put(name, headers=auth("mum"), json={"displayName": "Bob"})
    assert theirs.status_code == 403 and theirs.json()["error"]["code"] == "forbidden"
    blank = await client.put(name, headers=auth("sam"), json={"displayName": "   "})
    assert blank.status_code == 400
    stranger = await client.put(
        f"{FAMILIES}/{family_id}/members/eve/name", headers=auth("eve"), json={"displayName": "E"}
    )
    assert stranger.status_code == 404 and stranger.json()["error"]["code"] == "family_not_found"
    after = await client.get(f"{FAMILIES}/current", headers=auth("sam"))
    assert after.json()["family"]["members"][1]["displayName"] == "Sammy"


async def test_http_refusals_are_json_with_their_codes(client: httpx.AsyncClient) -> None:
    family = (await client.post(FAMILIES, headers=auth("mum"), json={"name": "A"})).json()["family"]
    invites = f"{FAMILIES}/{family['id']}/invites"
    cases = [
        (client.post(FAMILIES, headers=auth("mum"), json={"name": "B"}), 409, "already_in_family"),
        (
            client.post(invites, headers=auth("eve"), json={"role": "parent"}),
            404,
            "family_not_found",
        ),
        (client.get(invites, headers=auth("eve")), 404, "family_not_found"),
        (
            client.delete(f"{invites}/inv_x", headers=auth("mum")),
            404,
            "invite_not_found",
        ),
        (
            client.post(f"{FAMILIES}/join", headers=auth("eve"), json={"token": "forged"}),
            404,
            "invite_not_found",
        ),
        (
            client.patch(
                f"{FAMILIES}/{family['id']}/members/mum",
                headers=auth("mum"),
                json={"role": "dependent"},
            ),
            409,
            "last_parent",
        ),
        (client.get(f"{FAMILIES}/current", headers=auth("eve")), 404, "no_family"),
        (client.post(FAMILIES, json={"name": "A"}), 401, "unauthenticated"),
    ]
    for call, status, code in cases:
        response = await call
        assert (response.status_code, response.json()["error"]["code"]) == (status, code)
        assert response.json()["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "   "},
        {"name": "x" * 81},
        {"name": "A", "colour": "red"},
        {"name": "A\u0000B"},
        {"name": 5},
        {"name": "A", "displayName": ""},
    ],
)
async def test_http_bad_family_bodies_are_400(client: httpx.AsyncClient, body: object) -> None:
    response = await client.post(FAMILIES, headers=auth("mum"), json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert (await client.get(f"{FAMILIES}/current", headers=auth("mum"))).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"role": "owner"},
        {"role": "parent", "maxUses": 0},
        {"role": "parent", "maxUses": 11},
        {"role": "parent", "expiresInHours": 0},
        {"role": "parent", "expiresInHours": 169},
        {"role": "parent", "maxUses": "2"},
        {"role": "parent", "token": "mine"},
    ],
)
async def test_http_bad_invite_bodies_are_400(client: httpx.AsyncClient, body: object) -> None:
    family = (await client.post(FAMILIES, headers=auth("mum"), json={"name": "A"})).json()["family"]
    response = await client.post(
        f"{FAMILIES}/{family['id']}/invites", headers=auth("mum"), json=body
    )
    assert response.status_code == 400, response.text
    listed = await client.get(f"{FAMILIES}/{family['id']}/invites", headers=auth("mum"))
    assert listed.json() == {"invites": []}


async def test_http_wrong_methods_are_405_with_allow(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{FAMILIES}/join", headers=auth("mum"))
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    response = await client.put(f"{FAMILIES}/fam_1/members/sam", headers=auth("mum"))
    assert response.status_code == 405 and response.headers["allow"] == "PATCH, DELETE"
    response = await client.get(f"{FAMILIES}/fam_1/nothing", headers=auth("mum"))
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


async def test_http_joins_past_the_hourly_allowance_are_429_with_retry_after(
    client: httpx.AsyncClient,
) -> None:
    for _ in range(3):
        response = await client.post(f"{FAMILIES}/join", headers=auth("eve"), json={"token": "x"})
        assert response.status_code == 404
    response = await client.post(f"{FAMILIES}/join", headers=auth("eve"), json={"token": "x"})
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert 3500 <= int(response.headers["retry-after"]) <= 3600


async def test_http_a_reserved_id_in_a_path_is_404_as_an_unknown_id_of_its_kind(
    client: httpx.AsyncClient,
) -> None:
    """Ids of the form ``__x__`` (Firestore's reserved ones) name nothing: each id in a
    path goes through ``reserved`` first and answers as an unknown id of its kind does,
    for the family's own parent as for anyone (tests/e2e/test_families.py tries every
    route on the emulator, where reaching the store with one is a 5xx)."""
    created = await client.post(FAMILIES, headers=auth("mum"), json={"name": "The Smiths"})
    fid = created.json()["family"]["id"]
    role = {"role": "parent"}
    expected = [
        ("POST", f"{FAMILIES}/__x__/invites", role, "family_not_found"),
        ("GET", f"{FAMILIES}/__x__/progress", None, "family_not_found"),
        ("DELETE", f"{FAMILIES}/{fid}/invites/__x__", None, "invite_not_found"),
        ("PATCH", f"{FAMILIES}/{fid}/members/__x__", role, "member_not_found"),
        ("DELETE", f"{FAMILIES}/__y__/members/__x__", None, "family_not_found"),
        ("POST", "/api/spark/agent/tasks/__x__/cancel", None, "not_found"),
        ("POST", "/api/spark/agent/conversations/__x__/stop", None, "not_found"),
        ("GET", "/api/spark/lessons/__x__/versions", None, "not_found"),
    ]
    for method, path, body, code in expected:
        for headers in (auth("mum"), auth("eve")):
            answer = await client.request(method, path, headers=headers, json=body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (404, code), path
