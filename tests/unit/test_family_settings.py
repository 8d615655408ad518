"""``PATCH /api/spark/me/settings`` through the real functions-framework app, on fakes:
the truth and the caller's mirror change together, and bad input changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from spark_http.app import ApiApp

from shared.auth.base import StaticTokenVerifier, User
from shared.families.preferences import settings_violations
from shared.llm.scripted import ScriptedProvider
from shared.store.settings import settings_mirror_path, settings_path
from tests.unit.helpers import Fakes, make_service, serving

SETTINGS = "/api/spark/me/settings"
HEADERS = {"Authorization": "Bearer mum-token"}


@pytest.fixture
def fakes() -> Fakes:
    return Fakes()


@pytest.fixture
async def client(fakes: Fakes) -> AsyncIterator[httpx.AsyncClient]:
    harness = make_service(ScriptedProvider([]), fakes=fakes)
    verifier = StaticTokenVerifier({"mum-token": User(uid="mum", name="Mum")})
    async with serving(ApiApp(harness.agent, verifier, harness.settings)) as client:
        yield client


async def test_http_settings_opt_out_writes_truth_and_mirror(
    client: httpx.AsyncClient, fakes: Fakes
) -> None:
    response = await client.patch(SETTINGS, headers=HEADERS, json={"aiReadsFamilyMessages": False})
    assert response.status_code == 200, response.text
    settings = response.json()["settings"]
    assert settings["aiReadsFamilyMessages"] is False and settings["updatedAt"]
    truth = fakes.settings.documents[settings_path("mum")]
    assert fakes.settings.documents[settings_mirror_path("mum")] == truth
    assert truth["aiReadsFamilyMessages"] is False
    back = await client.patch(SETTINGS, headers=HEADERS, json={"aiReadsFamilyMessages": True})
    assert back.json()["settings"]["aiReadsFamilyMessages"] is True
    assert fakes.settings.documents[settings_mirror_path("mum")]["aiReadsFamilyMessages"] is True


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"aiReadsFamilyMessages": "false"},
        {"aiReadsFamilyMessages": 0},
        {"aiReadsFamilyMessages": None},
        {"aiReadsFamilyMessages": False, "colour": "red"},
        [False],
    ],
)
async def test_http_bad_settings_are_400_and_change_nothing(
    client: httpx.AsyncClient, fakes: Fakes, body: object
) -> None:
    response = await client.patch(SETTINGS, headers=HEADERS, json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert fakes.settings.documents == {}


async def test_http_settings_need_a_signed_in_caller_and_patch(
    client: httpx.AsyncClient, fakes: Fakes
) -> None:
    stranger = await client.patch(SETTINGS, json={"aiReadsFamilyMessages": False})
    assert stranger.status_code == 401
    wrong = await client.post(SETTINGS, headers=HEADERS, json={"aiReadsFamilyMessages": False})
    assert wrong.status_code == 405 and wrong.headers["allow"] == "PATCH"
    assert fakes.settings.documents == {}


def test_settings_violations_find_a_mirror_that_disagrees_with_its_truth() -> None:
    truth = {"aiReadsFamilyMessages": False, "updatedAt": "2026-01-01T00:00:00Z"}
    assert settings_violations(None, None) == []
    assert settings_violations(truth, dict(truth)) == []
    assert settings_violations(truth, None) == [f"the mirror None differs from the truth {truth!r}"]
    stale = {**truth, "aiReadsFamilyMessages": True}
    assert len(settings_violations(truth, stale)) == 1
    broken = {"aiReadsFamilyMessages": "maybe"}
    assert settings_violations(broken, broken) == [
        "the truth is not valid settings: 1 error(s)",
        "the mirror is not valid settings: 1 error(s)",
    ]
