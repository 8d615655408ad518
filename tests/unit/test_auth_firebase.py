"""``FirebaseTokenVerifier`` with real RS256 signatures, its public keys served on loopback.

Google's key URL is pointed at our server (the one SDK patch, inside the adapter's
own test), so forged, tampered, expired and misaddressed tokens meet the real checks.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from firebase_admin import _token_gen
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from shared.auth import firebase
from shared.auth.firebase import FirebaseTokenVerifier
from shared.errors import TokenExpired, Unauthenticated
from tests.fakes.keys import key_and_cert
from tests.fakes.openai_server import ServerThread

KID = "test-key"


@pytest.fixture(scope="module")
def signing() -> Iterator[tuple[rsa.RSAPrivateKey, str]]:
    key, cert = key_and_cert()
    app = Starlette(routes=[Route("/certs", lambda _: JSONResponse({KID: cert}))])
    with ServerThread(app) as server:
        yield key, f"http://127.0.0.1:{server.port}/certs"


@pytest.fixture
def verifier(
    signing: tuple[rsa.RSAPrivateKey, str], monkeypatch: pytest.MonkeyPatch
) -> FirebaseTokenVerifier:
    monkeypatch.delenv("FIREBASE_AUTH_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(_token_gen, "ID_TOKEN_CERT_URI", signing[1])
    return FirebaseTokenVerifier(f"demo-{secrets.token_hex(4)}")


def token(key: Any, project: str, kid: str = KID, **overrides: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": f"https://securetoken.google.com/{project}",
        "aud": project,
        "auth_time": now - 60,
        "iat": now - 60,
        "exp": now + 3600,
        "sub": "uid-alice",
        "name": "Alice",
        **overrides,
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def project_of(verifier: FirebaseTokenVerifier) -> str:
    return str(verifier._app.project_id)


async def test_firebase_verifier_accepts_a_genuine_token(
    verifier: FirebaseTokenVerifier, signing: tuple[rsa.RSAPrivateKey, str]
) -> None:
    user = await verifier.verify(token(signing[0], project_of(verifier)))
    assert (user.uid, user.name) == ("uid-alice", "Alice")


async def test_firebase_verifier_refuses_a_token_signed_by_another_key(
    verifier: FirebaseTokenVerifier,
) -> None:
    forger, _ = key_and_cert()
    with pytest.raises(Unauthenticated):
        await verifier.verify(token(forger, project_of(verifier)))


async def test_firebase_verifier_refuses_a_tampered_token(
    verifier: FirebaseTokenVerifier, signing: tuple[rsa.RSAPrivateKey, str]
) -> None:
    genuine = token(signing[0], project_of(verifier))
    other = token(signing[0], project_of(verifier), sub="uid-mallory")
    header, _, signature = genuine.split(".")
    tampered = ".".join([header, other.split(".")[1], signature])
    with pytest.raises(Unauthenticated):
        await verifier.verify(tampered)


async def test_firebase_verifier_refuses_expired_and_misaddressed_tokens(
    verifier: FirebaseTokenVerifier, signing: tuple[rsa.RSAPrivateKey, str]
) -> None:
    key, project = signing[0], project_of(verifier)
    with pytest.raises(TokenExpired):
        await verifier.verify(
            token(key, project, iat=int(time.time()) - 7200, exp=int(time.time()) - 3600)
        )
    with pytest.raises(Unauthenticated):
        await verifier.verify(token(key, "another-project"))
    with pytest.raises(Unauthenticated):
        await verifier.verify(token(key, project, kid="unknown-key"))
    with pytest.raises(Unauthenticated):
        await verifier.verify("not.a.jwt")


async def test_firebase_verifier_checks_a_token_once_then_only_its_expiry(
    verifier: FirebaseTokenVerifier,
    signing: tuple[rsa.RSAPrivateKey, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token verified once is not parsed and checked again on each request (each of
    a user's requests carries the same one for up to an hour), but it still expires."""
    genuine = token(signing[0], project_of(verifier))
    assert (await verifier.verify(genuine)).uid == "uid-alice"

    def refuse(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("verified again")

    monkeypatch.setattr(firebase.auth, "verify_id_token", refuse)
    assert (await verifier.verify(genuine)).uid == "uid-alice"
    later = time.time() + 7200
    monkeypatch.setattr(firebase.time, "time", lambda: later)
    with pytest.raises(TokenExpired):
        await verifier.verify(genuine)
