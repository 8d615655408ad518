"""App Check at the api's door (shared/appcheck): enforce refuses a missing, expired,
wrong-audience and replayed token, each with a clear 401; monitor lets every request
through and counts each verdict; off reads nothing. The key set is served on
loopback by the test (tests/appcheck_keys.py), never fetched from Google."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from spark_http.responses import error_response

from shared.appcheck.guard import AppCheck, AppCheckRefused, AppCheckReplayed, app_check, mode_of
from shared.appcheck.replays import InMemorySpentTokens
from shared.config import Settings
from shared.errors import ConfigurationError
from shared.observe import setup
from shared.observe.setup import Telemetry
from tests.appcheck_keys import PROJECT_ID, PROJECT_NUMBER, served_jwks, token


@pytest.fixture(scope="module")
def jwks_url() -> Iterator[str]:
    with served_jwks() as url:
        yield url


def settings(mode: str, jwks_url: str) -> Settings:
    return Settings.from_env(
        {
            "SPARK_APP_CHECK": mode,
            "SPARK_PROJECT_NUMBER": PROJECT_NUMBER,
            "GOOGLE_CLOUD_PROJECT": PROJECT_ID,
            "SPARK_APP_CHECK_JWKS_URL": jwks_url,
        }
    )


def door(mode: str, jwks_url: str) -> tuple[AppCheck, Telemetry]:
    telemetry = setup.in_memory()
    return app_check(settings(mode, jwks_url), InMemorySpentTokens(), telemetry.metrics), telemetry


def verdicts(telemetry: Telemetry) -> dict[tuple[str, str], int]:
    assert telemetry.readings is not None
    data = telemetry.readings.get_metrics_data()
    counted: dict[tuple[str, str], int] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "spark.app_check.verdicts":
                    for p in metric.data.data_points:
                        a = p.attributes or {}
                        key = (str(a["spark.app_check.mode"]), str(a["spark.app_check.verdict"]))
                        counted[key] = int(p.value)  # type: ignore[union-attr]
    return counted


async def refused(check: AppCheck, header: str | None, costly: bool = False) -> AppCheckRefused:
    with pytest.raises(AppCheckRefused) as caught:
        await check.admit(header, costly=costly)
    return caught.value


async def test_enforce_lets_a_valid_token_through(jwks_url: str) -> None:
    check, telemetry = door("enforce", jwks_url)
    await check.admit(token(), costly=False)
    await check.admit(token(), costly=True)
    assert verdicts(telemetry) == {("enforce", "valid"): 2}


async def test_enforce_refuses_a_missing_token_with_a_clear_401(jwks_url: str) -> None:
    check, _ = door("enforce", jwks_url)
    for header in (None, "", "   "):
        error = await refused(check, header)
        assert (error.status, error.code) == (401, "app_check_refused")
    response = error_response(error, "req-1")
    body = json.loads(bytes(response.body))
    assert response.status_code == 401
    assert body["error"]["code"] == "app_check_refused"
    assert "X-Firebase-AppCheck" in body["error"]["message"]


async def test_enforce_refuses_an_expired_token(jwks_url: str) -> None:
    check, _ = door("enforce", jwks_url)
    error = await refused(check, token(expires_in=-60))
    assert error.code == "app_check_refused" and "expired" in error.message


async def test_enforce_refuses_a_token_for_another_project(jwks_url: str) -> None:
    check, _ = door("enforce", jwks_url)
    error = await refused(check, token(audience=["projects/999", "projects/someone-else"]))
    assert error.message == "The App Check token is not valid for Spark AI Agent."


async def test_enforce_refuses_a_replayed_token_on_a_costly_call(jwks_url: str) -> None:
    check, telemetry = door("enforce", jwks_url)
    once = token()
    await check.admit(once, costly=True)
    error = await refused(check, once, costly=True)
    assert isinstance(error, AppCheckReplayed)
    assert (error.status, error.code) == (401, "app_check_replayed")
    await check.admit(once, costly=False)  # a call that costs nothing does not spend it
    assert verdicts(telemetry) == {("enforce", "valid"): 2, ("enforce", "replayed"): 1}


@pytest.mark.parametrize(
    "forged",
    [
        "not-a-jwt",
        token(issuer="https://firebaseappcheck.googleapis.com/999"),
        token(kid="someone-elses-key"),
        token(sub=""),
        token()[:-4] + "AAAA",  # the signature altered
    ],
    ids=["garbage", "issuer", "unknown-key", "no-app", "signature"],
)
async def test_enforce_refuses_a_forged_token(jwks_url: str, forged: str) -> None:
    check, _ = door("enforce", jwks_url)
    assert (await refused(check, forged)).code == "app_check_refused"


async def test_monitor_lets_every_request_through_and_counts_each_verdict(jwks_url: str) -> None:
    check, telemetry = door("monitor", jwks_url)
    spent = token()
    for header in (None, token(expires_in=-60), token(audience=["projects/9"]), spent, spent):
        await check.admit(header, costly=True)
    assert verdicts(telemetry) == {
        ("monitor", "missing"): 1,
        ("monitor", "expired"): 1,
        ("monitor", "invalid"): 1,
        ("monitor", "valid"): 1,
        ("monitor", "replayed"): 1,
    }


async def test_off_reads_nothing(jwks_url: str) -> None:
    check, telemetry = door("off", jwks_url)
    await check.admit(None, costly=True)
    await check.admit("not-a-jwt", costly=True)
    assert verdicts(telemetry) == {}


def test_a_mode_that_checks_tokens_needs_the_project_number_and_a_known_name() -> None:
    with pytest.raises(ConfigurationError, match="SPARK_PROJECT_NUMBER"):
        mode_of(Settings.from_env({"SPARK_APP_CHECK": "enforce"}))
    with pytest.raises(ConfigurationError, match="one of off, monitor, enforce"):
        mode_of(Settings.from_env({"SPARK_APP_CHECK": "strict"}))
    assert mode_of(Settings.from_env({})) == "off"


def test_a_local_key_set_is_refused_in_production() -> None:
    with pytest.raises(ConfigurationError, match="SPARK_APP_CHECK_JWKS_URL"):
        Settings.from_env({"K_SERVICE": "spark-api", "SPARK_APP_CHECK_JWKS_URL": "http://x"})


async def test_the_api_asks_app_check_on_every_route_but_health(jwks_url: str) -> None:
    """At the edge, enforced: the health check needs nothing, a plain call a valid token,
    a new run a limited-use one that works once; refusals are 401s with their own code,
    and a refused call reaches nothing behind the door."""
    from spark_http.app import ApiApp

    from shared.llm.scripted import ScriptedProvider
    from tests.unit.helpers import ALICE, StaticTokenVerifier, make_service, serving

    harness = make_service(ScriptedProvider([]))  # the reply is left to its task
    check, _ = door("enforce", jwks_url)
    api = ApiApp(
        harness.agent, StaticTokenVerifier({"alice-token": ALICE}), harness.settings, check
    )
    signed_in = {"Authorization": "Bearer alice-token"}
    async with serving(api) as client:
        assert (await client.get("/healthz")).status_code == 200
        bare = await client.get("/api/spark/agent/model", headers=signed_in)
        assert bare.status_code == 401
        assert bare.json()["error"]["code"] == "app_check_refused"
        app = {**signed_in, "X-Firebase-AppCheck": token()}
        assert (await client.get("/api/spark/agent/model", headers=app)).status_code == 200
        send = {"text": "hello"}
        refused = await client.post("/api/spark/agent/messages", headers=signed_in, json=send)
        assert refused.json()["error"]["code"] == "app_check_refused"
        once = {**signed_in, "X-Firebase-AppCheck": token()}
        assert (
            await client.post("/api/spark/agent/messages", headers=once, json=send)
        ).status_code == 202
        again = await client.post("/api/spark/agent/messages", headers=once, json=send)
        assert (again.status_code, again.json()["error"]["code"]) == (401, "app_check_replayed")
    # One message got through (its reply handed to one task): the refused ones left
    # nothing behind.
    replies = [t for t in harness.fakes.queue.take() if t.name.startswith("reply-")]
    assert len(replies) == 1


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("answers", {"toolCallId": "call-1", "answers": {"q": "yes"}}),
        ("approvals", {"toolCallId": "call-1", "approved": True}),
        ("tool-results", {"toolCallId": "call-1", "output": "done", "status": "ok"}),
    ],
)
async def test_a_replayed_token_is_refused_on_every_route_that_resumes_a_run(
    jwks_url: str, route: str, body: dict[str, object]
) -> None:
    """An answer, an approval or a client tool's result starts the model again, as a
    new message does: its App Check token works once, as through ``/chat``."""
    from spark_http.app import ApiApp

    from shared.llm.scripted import ScriptedProvider
    from tests.unit.helpers import ALICE, StaticTokenVerifier, make_service, serving

    harness = make_service(ScriptedProvider([]))
    check, _ = door("enforce", jwks_url)
    api = ApiApp(
        harness.agent, StaticTokenVerifier({"alice-token": ALICE}), harness.settings, check
    )
    once = {"Authorization": "Bearer alice-token", "X-Firebase-AppCheck": token()}
    path = f"/api/spark/agent/conversations/conv-1/{route}"
    async with serving(api) as client:
        first = await client.post(path, headers=once, json=body)
        assert first.json()["error"]["code"] != "app_check_replayed"
        again = await client.post(path, headers=once, json=body)
        assert (again.status_code, again.json()["error"]["code"]) == (401, "app_check_replayed")
