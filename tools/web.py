"""The reference web client's local server (``make dev`` serves it on :5173).

    python -m tools.web build                    # bundle web/src into web/dist (esbuild)
    python -m tools.web check                    # type-check web/src (tsc, tools/webtypes.py)
    python -m tools.web serve --port 5173 --api http://127.0.0.1:8080
    python -m tools.web serve --site DIR ...     # another page (index.html, app.js, app.css)

The page (``web/``) renders a conversation only from Firestore listeners and calls the
api only to act. This server gives it, on one origin, what a hosting front end gives a
deployed client:

* the page and its bundle, with a Content-Security-Policy that allows no inline script;
* ``/config.json``: the project and the emulators' addresses (read from the stack's
  environment), so the bundle holds no address;
* ``/api/…`` forwarded to the api as it is (so the browser makes no cross-origin call to
  it, and the api needs no CORS);
* ``/upload/…`` forwarded to the Cloud Storage emulator: the upload session URL the api
  returns points at the emulator, which answers no CORS preflight (Cloud Storage itself
  answers for the origin the session was started from); the page sends it here instead;
* ``/files/{path}``: the bytes of one of the caller's own files (the ID token must name
  the uid the path starts with), checked with the Auth emulator. A deployment reads them
  through Firebase Storage's own rules instead; nothing like it runs in production.

The same server serves another built page in the client's place (``--site``): the AI
SDK's ``useChat`` test page (``tests/ai_sdk/page/``), whose transport calls ``/api/…`` on
its own origin as a deployed front end would.

Nothing is fetched from a CDN: the Firebase JS SDK, marked and DOMPurify come from
``package-lock.json`` and are bundled here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tools import webtypes

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "web"
DIST = SOURCE / "dist"
ESBUILD = ROOT / "node_modules" / ".bin" / "esbuild"
PROJECT = "demo-spark"
BUCKET = f"{PROJECT}.appspot.com"
# Request headers not forwarded: hop-by-hop ones, and Host (the upstream's own).
_HOP = {"connection", "keep-alive", "host", "transfer-encoding", "content-length", "origin"}


def build() -> Path:
    """Generate the client's types from ``schemas/`` (``tools/webtypes.py``), then bundle
    ``web/src/main.ts`` (and the npm packages it imports) into ``web/dist/app.js`` and
    copy the stylesheet; returns the folder. esbuild only strips the types: ``check``
    checks them."""
    webtypes.generate(SOURCE)
    DIST.mkdir(parents=True, exist_ok=True)
    bundle(SOURCE / "src" / "main.ts", DIST / "app.js")
    (DIST / "app.css").write_bytes((SOURCE / "app.css").read_bytes())
    return DIST


def bundle(entry: Path, outfile: Path, *options: str) -> None:
    """``entry`` and the npm packages it imports, bundled by esbuild into ``outfile``
    (one ES module, minified, with its source map); ``options`` are esbuild's own."""
    if not ESBUILD.exists():
        sys.exit("esbuild is not installed; run `make setup` (npm ci) first.")
    subprocess.run(
        [
            str(ESBUILD),
            str(entry),
            "--bundle",
            "--format=esm",
            "--target=es2020",
            "--minify",
            "--sourcemap",
            "--legal-comments=none",
            *options,
            f"--outfile={outfile}",
        ],
        check=True,
        cwd=ROOT,
    )


@dataclass(frozen=True)
class Site:
    """What is served at ``/``: a page, and the folder its assets (``app.js``, its
    source map, ``app.css``) come from."""

    index: Path
    assets: Path

    @classmethod
    def built(cls, folder: Path) -> Site:
        """A page built into one folder, ``index.html`` beside its assets."""
        return cls(folder / "index.html", folder)


CLIENT = Site(SOURCE / "index.html", DIST)
"""The reference web client."""


@dataclass(frozen=True)
class Upstreams:
    """Where the page's calls go: the api, and the emulators the stack started."""

    api: str
    firestore: str  # host:port
    auth: str  # host:port
    storage: str  # http://host:port

    @classmethod
    def from_env(cls, api: str) -> Upstreams:
        env = os.environ
        return cls(
            api=api.rstrip("/"),
            firestore=env.get("FIRESTORE_EMULATOR_HOST", "127.0.0.1:8180"),
            auth=env.get("FIREBASE_AUTH_EMULATOR_HOST", "127.0.0.1:9099"),
            storage=env.get("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9199").rstrip("/"),
        )

    def policy(self) -> str:
        """The page's Content-Security-Policy: its own scripts only, no inline script or
        style, and connections only to itself and the two emulators the SDK talks to."""
        emulators = f"http://{self.firestore} http://{self.auth}"
        return "; ".join(
            [
                "default-src 'none'",
                "script-src 'self'",
                "style-src 'self'",
                "img-src 'self' blob: data:",
                # A reply read aloud plays from an object URL (web/src/voice.ts).
                "media-src 'self' blob:",
                f"connect-src 'self' {emulators}",
                "base-uri 'none'",
                "form-action 'none'",
                "frame-ancestors 'none'",
            ]
        )


def app(upstreams: Upstreams, site: Site = CLIENT) -> Starlette:
    client = httpx.AsyncClient(timeout=httpx.Timeout(30, read=None))
    headers = {
        "Content-Security-Policy": upstreams.policy(),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }

    async def page(request: Request) -> Response:
        return FileResponse(site.index, headers=headers)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in {"app.js", "app.js.map", "app.css"}:
            return JSONResponse({"error": {"code": "not_found", "message": "No such file."}}, 404)
        path = site.assets / name
        if not path.exists():
            message = "The web client is not built: run `python -m tools.web build`."
            return JSONResponse({"error": {"code": "not_built", "message": message}}, 503)
        return FileResponse(path, headers=headers)

    async def config(request: Request) -> Response:
        return JSONResponse(
            {
                "projectId": PROJECT,
                "apiKey": "local",
                "authEmulator": f"http://{upstreams.auth}",
                "firestoreEmulator": upstreams.firestore,
                "uploadsVia": upstreams.storage,
                "filesUrl": "/files/",
                "testUser": {"email": "teacher@example.com", "password": "spark-local"},
            },
            headers=headers,
        )

    async def forward(request: Request, base: str) -> Response:
        url = base + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        sent = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        upstream = await client.send(
            client.build_request(request.method, url, headers=sent, content=await request.body()),
            stream=True,
        )
        kept = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() not in _HOP and k.lower() != "content-encoding"
        }
        return StreamingResponse(
            _raw(upstream), upstream.status_code, kept, background=BackgroundTask(upstream.aclose)
        )

    async def api(request: Request) -> Response:
        return await forward(request, upstreams.api)

    async def upload(request: Request) -> Response:
        return await forward(request, upstreams.storage)

    async def files(request: Request) -> Response:
        path = request.path_params["path"]
        uid = await _uid(client, upstreams.auth, request.headers.get("authorization", ""))
        if uid is None or not path.startswith(f"{uid}/") or ".." in path.split("/"):
            message = "Only your own files can be read."
            return JSONResponse({"error": {"code": "forbidden", "message": message}}, 403)
        quoted = urllib.parse.quote(path, safe="")
        found = await client.get(f"{upstreams.storage}/storage/v1/b/{BUCKET}/o/{quoted}?alt=media")
        if found.status_code != 200:
            message = "There is no such file."
            return JSONResponse({"error": {"code": "not_found", "message": message}}, 404)
        media = found.headers.get("content-type", "application/octet-stream")
        return Response(found.content, media_type=media, headers={"Cache-Control": "private"})

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(
        routes=[
            Route("/", page),
            Route("/join", page),
            Route("/config.json", config),
            Route("/{name:str}", asset),
            Route("/api/{rest:path}", api, methods=methods),
            Route("/upload/{rest:path}", upload, methods=["PUT", "POST"]),
            Route("/files/{path:path}", files),
        ],
        lifespan=lambda _: _closing(client),
    )


@contextlib.asynccontextmanager
async def _closing(client: httpx.AsyncClient) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await client.aclose()


async def _raw(response: httpx.Response) -> AsyncIterator[bytes]:
    async for chunk in response.aiter_raw():
        yield chunk


async def _uid(client: httpx.AsyncClient, auth_host: str, authorization: str) -> str | None:
    """The uid of the bearer's ID token, as the Auth emulator knows it (``None``: none)."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    answer = await client.post(
        f"http://{auth_host}/identitytoolkit.googleapis.com/v1/accounts:lookup?key=local",
        json={"idToken": token},
    )
    users = answer.json().get("users") if answer.status_code == 200 else None
    return str(users[0]["localId"]) if users else None


def serve(port: int, api: str, site: Site = CLIENT) -> None:
    served = app(Upstreams.from_env(api), site)
    uvicorn.run(served, host="127.0.0.1", port=port, log_level="info")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["build", "check", "serve"])
    parser.add_argument("--port", type=int, default=5173)
    parser.add_argument("--api", default="http://127.0.0.1:8080")
    parser.add_argument(
        "--site", type=Path, help="serve the page built in this folder instead of the client"
    )
    args = parser.parse_args()
    if args.mode == "build":
        print(json.dumps({"built": str(build())}))
    elif args.mode == "check":
        checked = webtypes.check(SOURCE)
        sys.stdout.write(checked.stdout + checked.stderr)
        sys.exit(checked.returncode)
    else:
        serve(args.port, args.api, Site.built(args.site) if args.site else CLIENT)


if __name__ == "__main__":
    main()
