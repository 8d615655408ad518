"""App Check as our tests meet it: a key pair of their own, its public half served as
a JSON Web Key Set on loopback (never Google's), and tokens minted with it."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

PROJECT_NUMBER = "123456789012"
PROJECT_ID = "demo-spark"
APP_ID = "1:123456789012:web:0123456789abcdef"
KID = "local-app-check"

_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks() -> bytes:
    """The public key set, as App Check publishes its own."""
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(_KEY.public_key()))
    return json.dumps({"keys": [{**public, "kid": KID, "alg": "RS256", "use": "sig"}]}).encode()


def token(
    *,
    expires_in: float = 3600,
    audience: list[str] | None = None,
    issuer: str | None = None,
    kid: str = KID,
    jti: str | None = None,
    **claims: Any,
) -> str:
    """A token of our app, as App Check mints one (limited-use: with a ``jti``)."""
    now = int(time.time())
    body = {
        "sub": APP_ID,
        "aud": audience or [f"projects/{PROJECT_NUMBER}", f"projects/{PROJECT_ID}"],
        "iss": issuer or f"https://firebaseappcheck.googleapis.com/{PROJECT_NUMBER}",
        "iat": now,
        "exp": now + int(expires_in),
        "jti": jti or uuid.uuid4().hex,
        **claims,
    }
    return jwt.encode(body, _KEY, algorithm="RS256", headers={"kid": kid, "typ": "JWT"})


@contextlib.contextmanager
def served_jwks() -> Iterator[str]:
    """The key set served on 127.0.0.1; yields its URL."""
    body = jwks()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "public, max-age=21600")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/jwks"
    finally:
        server.shutdown()
        server.server_close()
