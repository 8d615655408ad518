"""Who may call the ``tasks`` function: locally, calls signed with the local key; in
production, Google-signed OIDC tokens for our service account (real RS256 signatures,
the certificates served on loopback), and nobody else."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from shared.auth.oidc import OidcTaskVerifier
from shared.auth.tasks import LocalTaskVerifier, RefuseAllTaskCalls
from shared.errors import AuthUnavailable, Forbidden, Unauthenticated
from shared.queue.base import SIGNATURE_HEADER, TASK_NAME_HEADER, sign
from tests.fakes.keys import key_and_cert
from tests.fakes.openai_server import ServerThread

LOCAL_KEY = "local-test-key"
BODY = b'{"kind":"tool","taskId":"t1","attempt":1}'

KID = "queue-key"
AUDIENCE = "https://europe-west2-demo-spark.cloudfunctions.net/tasks"
SERVICE_ACCOUNT = "spark-tasks@demo-spark.iam.gserviceaccount.com"


# --- local mode ---------------------------------------------------------------------------


def signed(
    key: str = LOCAL_KEY, body: bytes = BODY, name: str = "t1-1", at: int | None = None
) -> dict[str, str]:
    """Headers of a local call, as our queue adapter and the emulator send them."""
    at = int(time.time()) if at is None else at
    return {SIGNATURE_HEADER.lower(): sign(key, body, name, at), TASK_NAME_HEADER.lower(): name}


async def test_local_verifier_accepts_a_body_signed_with_the_local_key() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)

    await verifier.verify(signed(), BODY)


async def test_local_verifier_accepts_the_signature_header_in_its_original_case() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)

    headers = signed()
    original = {SIGNATURE_HEADER: headers[SIGNATURE_HEADER.lower()], TASK_NAME_HEADER: "t1-1"}
    await verifier.verify(original, BODY)


async def test_local_verifier_refuses_a_call_without_a_signature() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)

    with pytest.raises(Unauthenticated):
        await verifier.verify({}, BODY)
    with pytest.raises(Unauthenticated):
        await verifier.verify({SIGNATURE_HEADER.lower(): ""}, BODY)


async def test_local_verifier_refuses_a_signature_made_with_another_key() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)

    with pytest.raises(Unauthenticated):
        await verifier.verify(signed(key="another-key"), BODY)


async def test_local_verifier_refuses_a_garbage_signature() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)

    with pytest.raises(Unauthenticated):
        await verifier.verify({SIGNATURE_HEADER.lower(): "not-a-signature"}, BODY)


async def test_local_verifier_refuses_the_signature_of_a_different_body() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)
    other = b'{"kind":"tool","taskId":"t1","attempt":2}'

    with pytest.raises(Unauthenticated):
        await verifier.verify(signed(body=other), BODY)


async def test_local_verifier_refuses_a_non_ascii_signature() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)

    with pytest.raises(Unauthenticated):
        await verifier.verify({SIGNATURE_HEADER.lower(): "\xe9" * 64}, BODY)


async def test_refuse_all_task_calls_refuses_even_a_validly_signed_call() -> None:
    with pytest.raises(Unauthenticated, match="SPARK_TASKS_LOCAL_KEY"):
        await RefuseAllTaskCalls().verify(signed(), BODY)


# --- production mode: OIDC ----------------------------------------------------------------


@dataclass(frozen=True)
class Google:
    """Our stand-in for Google's token keys: the private key and where its cert is served."""

    key: rsa.RSAPrivateKey
    certs_url: str
    broken_certs_url: str


async def _broken(_: Request) -> JSONResponse:
    return JSONResponse({"error": "unavailable"}, status_code=503)


@pytest.fixture(scope="module")
def google() -> Iterator[Google]:
    key, cert = key_and_cert()
    app = Starlette(
        routes=[
            Route("/certs", lambda _: JSONResponse({KID: cert})),
            Route("/broken", _broken),
        ]
    )
    with ServerThread(app) as server:
        base = f"http://127.0.0.1:{server.port}"
        yield Google(key, f"{base}/certs", f"{base}/broken")


@pytest.fixture
def verifier(google: Google) -> OidcTaskVerifier:
    return OidcTaskVerifier(AUDIENCE, SERVICE_ACCOUNT, certs_url=google.certs_url)


def token(key: Any, kid: str = KID, **overrides: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": "https://accounts.google.com",
        "aud": AUDIENCE,
        "sub": "113300000000000000000",
        "email": SERVICE_ACCOUNT,
        "email_verified": True,
        "iat": now - 60,
        "exp": now + 3600,
        **overrides,
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def bearer(value: str) -> dict[str, str]:
    return {"authorization": f"Bearer {value}"}


async def test_oidc_verifier_accepts_a_token_for_our_service_account(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    await verifier.verify(bearer(token(google.key)), BODY)


async def test_oidc_verifier_accepts_the_short_google_issuer(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    await verifier.verify(bearer(token(google.key, iss="accounts.google.com")), BODY)


async def test_oidc_verifier_refuses_a_call_without_authorization(
    verifier: OidcTaskVerifier,
) -> None:
    with pytest.raises(Unauthenticated):
        await verifier.verify({}, BODY)


async def test_oidc_verifier_refuses_a_header_that_is_not_a_bearer_token(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    with pytest.raises(Unauthenticated):
        await verifier.verify({"authorization": f"Basic {token(google.key)}"}, BODY)
    with pytest.raises(Unauthenticated):
        await verifier.verify({"authorization": "Bearer "}, BODY)
    with pytest.raises(Unauthenticated):
        await verifier.verify(bearer("not.a.jwt"), BODY)


async def test_oidc_verifier_ignores_a_local_signature_in_production(
    verifier: OidcTaskVerifier,
) -> None:
    with pytest.raises(Unauthenticated):
        await verifier.verify(signed(), BODY)


async def test_oidc_verifier_refuses_a_token_for_another_audience(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    with pytest.raises(Unauthenticated):
        await verifier.verify(bearer(token(google.key, aud="https://example.com/other")), BODY)


async def test_oidc_verifier_refuses_an_expired_token(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    now = int(time.time())
    expired = token(google.key, iat=now - 7200, exp=now - 3600)

    with pytest.raises(Unauthenticated):
        await verifier.verify(bearer(expired), BODY)


async def test_oidc_verifier_refuses_a_token_signed_by_another_key(
    verifier: OidcTaskVerifier,
) -> None:
    forger, _ = key_and_cert()

    with pytest.raises(Unauthenticated):
        await verifier.verify(bearer(token(forger)), BODY)


async def test_oidc_verifier_refuses_a_token_with_an_unknown_key_id(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    with pytest.raises(Unauthenticated):
        await verifier.verify(bearer(token(google.key, kid="unknown-key")), BODY)


async def test_oidc_verifier_refuses_a_tampered_token(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    genuine = token(google.key, email="someone@example.com")
    ours = token(google.key)
    header, _, signature = genuine.split(".")
    tampered = ".".join([header, ours.split(".")[1], signature])

    with pytest.raises(Unauthenticated):
        await verifier.verify(bearer(tampered), BODY)


async def test_oidc_verifier_forbids_another_service_account(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    other = token(google.key, email="mallory@evil-project.iam.gserviceaccount.com")

    with pytest.raises(Forbidden):
        await verifier.verify(bearer(other), BODY)


async def test_oidc_verifier_forbids_an_unverified_email(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    with pytest.raises(Forbidden):
        await verifier.verify(bearer(token(google.key, email_verified=False)), BODY)


async def test_oidc_verifier_forbids_a_token_without_an_email(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    claims_without_email = token(google.key, email=None, email_verified=None)

    with pytest.raises(Forbidden):
        await verifier.verify(bearer(claims_without_email), BODY)


async def test_oidc_verifier_refuses_a_token_from_another_issuer(
    verifier: OidcTaskVerifier, google: Google
) -> None:
    with pytest.raises(Unauthenticated):
        await verifier.verify(bearer(token(google.key, iss="https://evil.example.com")), BODY)


async def test_oidc_verifier_reports_unreachable_google_keys_as_unavailable(
    google: Google,
) -> None:
    verifier = OidcTaskVerifier(AUDIENCE, SERVICE_ACCOUNT, certs_url=google.broken_certs_url)

    with pytest.raises(AuthUnavailable):
        await verifier.verify(bearer(token(google.key)), BODY)


async def test_oidc_verifier_fetches_googles_certificates_once_not_per_call(
    google: Google,
) -> None:
    verifier = OidcTaskVerifier(AUDIENCE, SERVICE_ACCOUNT, certs_url=google.certs_url)
    for _ in range(5):
        await verifier.verify(bearer(token(google.key)), BODY)
    assert verifier._transport.fetches == 1


async def test_local_verifier_refuses_an_old_call_replayed() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)
    with pytest.raises(Unauthenticated):
        await verifier.verify(signed(at=int(time.time()) - 3600), BODY)


async def test_local_verifier_refuses_a_signature_made_for_another_task() -> None:
    verifier = LocalTaskVerifier(LOCAL_KEY)
    headers = signed(name="t1-1")
    headers[TASK_NAME_HEADER.lower()] = "t2-1"
    with pytest.raises(Unauthenticated):
        await verifier.verify(headers, BODY)
