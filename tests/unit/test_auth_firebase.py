"""``FirebaseTokenVerifier`` with real RS256 signatures, its public keys served on loopback.

Forged, tampered, expired and misaddressed tokens meet the real checks; a contract test
holds ours and firebase-admin's ``verify_id_token`` (Google's key URL pointed at our
server, the one SDK patch) to the same verdict on each token.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shared.auth import firebase
from shared.auth.firebase import FirebaseTokenVerifier, PublicKeys
from shared.errors import AuthUnavailable, TokenExpired, Unauthenticated
from tests.fakes.keys import key_and_cert
from tests.fakes.openai_server import ServerThread

KID = "test-key"


class KeyServer:
    """Google's key endpoint on loopback: counts its requests; ``down`` answers 503."""

    def __init__(self, cert: str) -> None:
        self.certs = {KID: cert}
        self.requests = 0
        self.down = False
        self.max_age = 21600

    async def serve(self, _: Request) -> Response:
        self.requests += 1
        if self.down:
            return Response("unavailable", status_code=503)
        headers = {"Cache-Control": f"public, max-age={self.max_age}, must-revalidate"}
        return JSONResponse(self.certs, headers=headers)


@pytest.fixture(scope="module")
def signing() -> Iterator[tuple[rsa.RSAPrivateKey, KeyServer, str]]:
    key, cert = key_and_cert()
    keys = KeyServer(cert)
    with ServerThread(Starlette(routes=[Route("/certs", keys.serve)])) as server:
        yield key, keys, f"http://127.0.0.1:{server.port}/certs"


@pytest.fixture
def server(signing: tuple[rsa.RSAPrivateKey, KeyServer, str]) -> Iterator[KeyServer]:
    keys = signing[1]
    keys.requests, keys.down, keys.max_age = 0, False, 21600
    yield keys
    keys.down = False


@pytest.fixture
def project() -> str:
    return f"demo-{secrets.token_hex(4)}"


@pytest.fixture
def verifier(signing: tuple[rsa.RSAPrivateKey, KeyServer, str], project: str) -> Any:
    return FirebaseTokenVerifier(project, keys=PublicKeys(signing[2]))


def token(key: Any, project: str, kid: str | None = KID, **overrides: Any) -> str:
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
    claims = {name: value for name, value in claims.items() if value is not None}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid} if kid else None)


def unsigned(project: str, header: dict[str, Any] | None = None, **overrides: Any) -> str:
    """A token as the Auth emulator makes them: ``alg: none``, no signature."""
    now = int(time.time())
    claims = {
        "iss": f"https://securetoken.google.com/{project}",
        "aud": project,
        "iat": now - 10,
        "exp": now + 3600,
        "sub": "uid-bob",
        **overrides,
    }

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return part(header or {"alg": "none", "typ": "JWT"}) + "." + part(claims) + "."


async def test_firebase_verifier_accepts_a_genuine_token(
    verifier: FirebaseTokenVerifier,
    signing: tuple[rsa.RSAPrivateKey, KeyServer, str],
    project: str,
) -> None:
    user = await verifier.verify(token(signing[0], project))
    assert (user.uid, user.name) == ("uid-alice", "Alice")


async def test_firebase_verifier_refuses_a_token_signed_by_another_key(
    verifier: FirebaseTokenVerifier, project: str
) -> None:
    forger, _ = key_and_cert()
    with pytest.raises(Unauthenticated):
        await verifier.verify(token(forger, project))


async def test_firebase_verifier_refuses_a_tampered_token(
    verifier: FirebaseTokenVerifier,
    signing: tuple[rsa.RSAPrivateKey, KeyServer, str],
    project: str,
) -> None:
    genuine = token(signing[0], project)
    other = token(signing[0], project, sub="uid-mallory")
    header, _, signature = genuine.split(".")
    with pytest.raises(Unauthenticated):
        await verifier.verify(".".join([header, other.split(".")[1], signature]))


async def test_firebase_verifier_refuses_expired_misaddressed_and_malformed_tokens(
    verifier: FirebaseTokenVerifier,
    signing: tuple[rsa.RSAPrivateKey, KeyServer, str],
    project: str,
) -> None:
    key, now = signing[0], int(time.time())
    with pytest.raises(TokenExpired):
        await verifier.verify(token(key, project, iat=now - 7200, exp=now - 3600))
    for bad in [
        token(key, "another-project"),
        token(key, project, iss="https://securetoken.google.com/another-project"),
        token(key, project, kid="unknown-key"),
        token(key, project, kid=None),
        token(key, project, sub=""),
        token(key, project, sub="u" * 129),
        token(key, project, iat=None),
        token(key, project, iat=now + 600),
        unsigned(project),  # unsigned, outside the emulator
        jwt.encode({"sub": "uid-alice", "aud": project}, "s" * 32, algorithm="HS256"),
        "not.a.jwt",
        "two.parts",
        "",
    ]:
        with pytest.raises(Unauthenticated):
            await verifier.verify(bad)


async def test_firebase_verifier_checks_a_token_once_then_only_its_lifetime(
    verifier: FirebaseTokenVerifier,
    signing: tuple[rsa.RSAPrivateKey, KeyServer, str],
    project: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A token verified once is not checked again on each request (each of a user's
    requests carries the same one for up to an hour), but it still expires."""
    genuine = token(signing[0], project)
    assert (await verifier.verify(genuine)).uid == "uid-alice"

    def refuse(*args: Any) -> bool:
        raise AssertionError("verified again")

    monkeypatch.setattr(firebase, "_signature_valid", refuse)
    assert (await verifier.verify(genuine)).uid == "uid-alice"
    later = time.time() + 7200
    monkeypatch.setattr(firebase.time, "time", lambda: later)
    with pytest.raises(TokenExpired):
        await verifier.verify(genuine)


async def test_firebase_verifier_fetches_the_keys_once_while_fresh(
    signing: tuple[rsa.RSAPrivateKey, KeyServer, str],
    server: KeyServer,
    project: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Concurrent first requests share one fetch; later tokens are checked on the loop
    itself with the keys kept (no worker thread: its hop was ~0.3 ms of a new user's
    first token), and a token naming an unknown key refetches at most once a minute."""
    verifier = FirebaseTokenVerifier(project, keys=PublicKeys(signing[2]))
    tokens = [token(signing[0], project, sub=f"uid-{n}") for n in range(20)]
    users = await asyncio.gather(*(verifier.verify(t) for t in tokens))
    assert [u.uid for u in users] == [f"uid-{n}" for n in range(20)]
    assert server.requests == 1

    async def no_thread(*args: Any) -> Any:
        raise AssertionError("a worker thread")

    monkeypatch.setattr(firebase.asyncio, "to_thread", no_thread)
    assert (await verifier.verify(token(signing[0], project, sub="uid-x"))).uid == "uid-x"
    monkeypatch.undo()
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            await verifier.verify(token(signing[0], project, kid="rotated-in"))
    assert server.requests == 1  # fetched less than a minute ago: no refetch


async def test_firebase_verifier_refetches_stale_keys_and_says_when_it_cannot(
    signing: tuple[rsa.RSAPrivateKey, KeyServer, str], server: KeyServer, project: str
) -> None:
    server.max_age = 0  # stale as soon as fetched
    verifier = FirebaseTokenVerifier(project, keys=PublicKeys(signing[2]))
    await verifier.verify(token(signing[0], project, sub="uid-1"))
    await verifier.verify(token(signing[0], project, sub="uid-2"))
    assert server.requests == 2
    server.down = True
    with pytest.raises(AuthUnavailable):  # a 503, not "sign in again"
        await verifier.verify(token(signing[0], project, sub="uid-3"))


async def test_firebase_verifier_keeps_fresh_keys_when_an_unknown_keys_refetch_fails(
    signing: tuple[rsa.RSAPrivateKey, KeyServer, str],
    server: KeyServer,
    project: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verifier = FirebaseTokenVerifier(project, keys=PublicKeys(signing[2]))
    await verifier.verify(token(signing[0], project, sub="uid-1"))
    later = time.monotonic() + 120
    monkeypatch.setattr(firebase.time, "monotonic", lambda: later)
    server.down = True
    with pytest.raises(Unauthenticated):
        await verifier.verify(token(signing[0], project, kid="rotated-in"))
    assert server.requests == 2
    assert (await verifier.verify(token(signing[0], project, sub="uid-2"))).uid == "uid-2"


async def test_firebase_verifier_accepts_the_emulators_unsigned_tokens_only_when_emulated(
    project: str,
) -> None:
    def no_keys(url: str) -> tuple[bytes, str | None]:
        raise AssertionError("the emulator's tokens need no keys")

    emulated = FirebaseTokenVerifier(project, emulated=True, keys=PublicKeys(fetch=no_keys))
    assert (await emulated.verify(unsigned(project))).uid == "uid-bob"
    now = int(time.time())
    with pytest.raises(TokenExpired):
        await emulated.verify(unsigned(project, iat=now - 7200, exp=now - 3600))
    for bad in [unsigned("another-project"), unsigned(project, sub=""), "a.b.c"]:
        with pytest.raises(Unauthenticated):
            await emulated.verify(bad)


def _corpus(key: rsa.RSAPrivateKey, project: str) -> dict[str, str]:
    forger, _ = key_and_cert()
    now = int(time.time())
    genuine = token(key, project)
    other = token(key, project, sub="uid-mallory")
    return {
        "genuine": genuine,
        "genuine, no name": token(key, project, name=None),
        "forged": token(forger, project),
        "tampered": ".".join([genuine.split(".")[0], other.split(".")[1], genuine.split(".")[2]]),
        "expired": token(key, project, iat=now - 7200, exp=now - 3600),
        "issued in the future": token(key, project, iat=now + 600),
        "no iat": token(key, project, iat=None),
        "no exp": token(key, project, exp=None),
        "another audience": token(key, "another-project"),
        "another issuer": token(key, project, iss="https://securetoken.google.com/x"),
        "custom token": token(key, project, aud=firebase._CUSTOM_TOKEN_AUDIENCE),
        "unknown key": token(key, project, kid="unknown-key"),
        "no key id": token(key, project, kid=None),
        "empty subject": token(key, project, sub=""),
        "long subject": token(key, project, sub="u" * 129),
        "subject a number": token(key, project, sub=7),
        "unsigned": unsigned(project, {"alg": "none", "kid": KID}),
        "HS256": jwt.encode(
            {"sub": "u", "aud": project, "iss": f"https://securetoken.google.com/{project}"},
            "s" * 32,
            algorithm="HS256",
            headers={"kid": KID},
        ),
        "not a jwt": "not.a.jwt",
        "two parts": "two.parts",
    }


def test_firebase_verifier_agrees_with_firebase_admin_on_every_token(
    signing: tuple[rsa.RSAPrivateKey, KeyServer, str],
    project: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The contract: each token accepted (with the same user) or refused by both."""
    import firebase_admin
    from firebase_admin import _token_gen, auth
    from firebase_admin import credentials as admin_credentials
    from google.auth.credentials import AnonymousCredentials

    class NoCredentials(admin_credentials.Base):  # type: ignore[misc]
        def get_credential(self) -> Any:
            return AnonymousCredentials()  # type: ignore[no-untyped-call]

    monkeypatch.delenv("FIREBASE_AUTH_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(_token_gen, "ID_TOKEN_CERT_URI", signing[2])
    app = firebase_admin.initialize_app(
        NoCredentials(), options={"projectId": project}, name=f"contract-{project}"
    )
    ours = FirebaseTokenVerifier(project, keys=PublicKeys(signing[2]))
    verdicts = {}
    try:
        for name, candidate in _corpus(signing[0], project).items():
            try:
                theirs = str(auth.verify_id_token(candidate, app=app)["uid"])
            except (auth.InvalidIdTokenError, ValueError):
                theirs = "refused"
            try:
                mine = asyncio.run(ours.verify(candidate)).uid
            except Unauthenticated:
                mine = "refused"
            verdicts[name] = (theirs, mine)
    finally:
        firebase_admin.delete_app(app)
    assert {name: v for name, v in verdicts.items() if v[0] != v[1]} == {}
    assert verdicts["genuine"] == ("uid-alice", "uid-alice")
    assert sum(v[0] == "refused" for v in verdicts.values()) == len(verdicts) - 2


async def test_firebase_verifier_refuses_at_once_for_a_while_after_a_failed_fetch(
    project: str,
) -> None:
    """Requests waiting on a failed fetch of stale keys are not each given a fetch of
    their own, one after another: a 503 at once, and one fetch."""
    import http.client

    fetches = []

    def failing(url: str) -> tuple[bytes, str | None]:
        fetches.append(url)
        time.sleep(0.05)
        raise http.client.IncompleteRead(b"")  # not an OSError: still a 503

    verifier = FirebaseTokenVerifier(project, keys=PublicKeys(fetch=failing))
    key, _ = key_and_cert()
    tokens = [token(key, project, sub=f"uid-{n}") for n in range(5)]
    results = await asyncio.gather(*(verifier.verify(t) for t in tokens), return_exceptions=True)
    assert all(isinstance(r, AuthUnavailable) for r in results)
    assert len(fetches) == 1


async def test_firebase_verifier_refuses_a_token_nested_too_deep(
    verifier: FirebaseTokenVerifier,
) -> None:
    deep = base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=")
    with pytest.raises(Unauthenticated):  # a 401, not a RecursionError's 500
        await verifier.verify(f"{deep}.{deep}.sig")
