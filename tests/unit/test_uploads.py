"""Upload sessions: the name and path the server picks, the rules a file must meet
before a session is started, and ``POST /api/spark/agent/uploads`` through the real
functions-framework app, on fakes."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.attachment_rules import (
    ACCEPTED,
    DERIVED_SUFFIXES,
    MAX_BYTES,
    MediaType,
    path_problem,
)
from shared.attachments.uploads import SAFE_NAME_CHARS, Uploads, browser_origin, safe_name
from shared.clock import ManualClock
from shared.errors import PayloadTooLarge, RequestError, UnsupportedMediaType
from shared.ids import SequentialIds
from shared.llm.scripted import ScriptedProvider, Step
from shared.store.files import InMemoryFileStore
from tests.samples import png_with_gps
from tests.unit.helpers import Fakes, Harness, api_of, make_service, serving

UPLOADS = "/api/spark/agent/uploads"
MESSAGES = "/api/spark/agent/messages"
ALICE_AUTH = {"Authorization": "Bearer alice-token"}
SAFE = re.compile(r"[A-Za-z0-9._-]{1,100}")


# --- the name the server gives a file -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "media_type", "safe"),
    [
        ("My homework (1).png", "image/png", "My_homework_1.png"),
        ("résumé final.pdf", "application/pdf", "resume_final.pdf"),
        ("../../etc/passwd", "application/pdf", "etc_passwd.pdf"),
        ("a/b\\c.jpg", "image/jpeg", "a_b_c.jpg"),
        ("scan", "image/jpeg", "scan.jpg"),
        ("report.final version", "application/pdf", "report.final_version.pdf"),
        (".hidden", "image/png", "hidden.png"),
        ("日本語.png", "image/png", "file.png"),
        ("tab\there\x00.PNG", "image/png", "tab_here.PNG"),
        ("photo.normalised.jpg", "image/jpeg", "photo_normalised.jpg"),
        ("notes.text.txt", "application/pdf", "notes_text.txt"),
        ("a..b...png", "image/png", "a.b.png"),
    ],
)
def test_safe_name_keeps_what_is_safe_and_the_extension(
    name: str, media_type: MediaType, safe: str
) -> None:
    assert safe_name(name, media_type) == safe


def test_safe_name_is_bounded_and_keeps_its_extension() -> None:
    safe = safe_name("a" * 250 + ".jpeg", "image/jpeg")
    assert len(safe) == SAFE_NAME_CHARS
    assert safe.endswith("a.jpeg")


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=300), media_type=st.sampled_from(ACCEPTED))
def test_safe_name_always_gives_a_path_an_upload_may_have(name: str, media_type: MediaType) -> None:
    safe = safe_name(name, media_type)
    assert SAFE.fullmatch(safe), safe
    assert not safe.endswith(DERIVED_SUFFIXES)
    assert path_problem("alice", f"alice/uploads/upl_x7/{safe}") is None


@pytest.mark.parametrize(
    ("header", "origin"),
    [
        ("https://app.example.com", "https://app.example.com"),
        ("http://localhost:5173", "http://localhost:5173"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("null", None),
        ("https://app.example.com/path", None),
        ("javascript:alert(1)", None),
        (None, None),
    ],
)
def test_browser_origin_passes_only_an_origin(header: str | None, origin: str | None) -> None:
    assert browser_origin(header) == origin


# --- the rules, before any session -----------------------------------------------------


@pytest.fixture
def files() -> InMemoryFileStore:
    return InMemoryFileStore()


@pytest.fixture
def uploads(files: InMemoryFileStore) -> Uploads:
    clock = ManualClock()
    harness = make_service(ScriptedProvider([]), clock=clock, fakes=Fakes(files=files))
    return Uploads(files, SequentialIds(), clock, harness.budget)


async def test_uploads_start_picks_a_fresh_path_under_the_callers_prefix(
    uploads: Uploads, files: InMemoryFileStore
) -> None:
    first = await uploads.start("alice", "Essay draft.pdf", "application/pdf", 1234)
    second = await uploads.start("alice", "Essay draft.pdf", "application/pdf", 1234)
    assert first.storage_path == "alice/uploads/upl_1/Essay_draft.pdf"
    assert second.storage_path == "alice/uploads/upl_2/Essay_draft.pdf"
    assert first.expires_at == ManualClock().now() + timedelta(days=7)
    session = files.sessions[first.url]
    assert (session.path, session.content_type, session.size_bytes, session.origin) == (
        first.storage_path,
        "application/pdf",
        1234,
        None,
    )
    assert files.paths() == []  # nothing is stored until the client uploads


@pytest.mark.parametrize(
    ("name", "content_type", "size", "error", "words"),
    [
        ("cat.gif", "image/gif", 10, UnsupportedMediaType, "only JPEG, PNG and PDF"),
        ("notes.txt", "text/plain", 10, UnsupportedMediaType, "'notes.txt' is 'text/plain'"),
        ("big.pdf", "application/pdf", MAX_BYTES + 1, PayloadTooLarge, "at most 25 MB"),
        ("empty.png", "image/png", 0, RequestError, "at least 1 byte"),
        ("odd.png", "image/png", -5, RequestError, "at least 1 byte"),
        ("", "image/png", 10, RequestError, "fileName must not be empty"),
        ("   ", "image/png", 10, RequestError, "fileName must not be empty"),
        ("x" * 256, "image/png", 10, RequestError, "at most 255 characters"),
    ],
)
async def test_uploads_refuses_a_file_that_breaks_a_rule_and_starts_nothing(
    uploads: Uploads,
    files: InMemoryFileStore,
    name: str,
    content_type: str,
    size: int,
    error: type[RequestError],
    words: str,
) -> None:
    with pytest.raises(error) as caught:
        await uploads.start("alice", name, content_type, size)
    assert type(caught.value) is error
    assert words in caught.value.message
    assert files.sessions == {}


async def test_uploads_takes_exactly_25_mb(uploads: Uploads, files: InMemoryFileStore) -> None:
    upload = await uploads.start("alice", "big.pdf", "application/pdf", MAX_BYTES)
    assert files.sessions[upload.url].size_bytes == MAX_BYTES


# --- the route -------------------------------------------------------------------------


@pytest.fixture
def harness() -> Harness:
    return make_service(ScriptedProvider([Step.reply("Nice work!")]), clock=ManualClock())


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(api_of(harness)) as client:
        yield client


async def test_post_upload_starts_a_session_then_the_file_can_be_attached(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    png = png_with_gps()
    headers = {**ALICE_AUTH, "Origin": "https://app.example.com"}
    body = {"fileName": "Map homework.png", "contentType": "image/png", "sizeBytes": len(png)}
    response = await client.post(UPLOADS, headers=headers, json=body)
    assert response.status_code == 201
    answer = response.json()
    assert answer == {
        "storagePath": "alice/uploads/upl_1/Map_homework.png",
        "uploadUrl": answer["uploadUrl"],
        "method": "PUT",
        "headers": {"Content-Type": "image/png"},
        "expiresAt": "2026-01-08T00:00:00Z",
    }
    files = harness.fakes.files
    session = files.sessions[answer["uploadUrl"]]
    assert session.origin == "https://app.example.com"
    assert session.size_bytes == len(png)

    await files.complete_upload(answer["uploadUrl"], png)
    attachment = {
        "storagePath": answer["storagePath"],
        "contentType": "image/png",
        "sizeBytes": len(png),
    }
    sent = await client.post(
        MESSAGES,
        headers={**ALICE_AUTH, "Accept": "text/event-stream"},
        json={"text": "Please look", "attachments": [attachment]},
    )
    assert sent.status_code == 200
    assert files.paths() == [
        "alice/uploads/upl_1/Map_homework.png",
        "alice/uploads/upl_1/Map_homework.png.normalised.jpg",
    ]
    (stored,) = harness.store._documents.values()
    (image,) = [p for p in stored["messages"][0]["content"] if "file" in p]
    # The name its owner gave it (the path has the safe form; the id is a folder).
    assert image["file"]["name"] == "Map homework.png"


@pytest.mark.parametrize(
    ("body", "status", "code", "words"),
    [
        (
            {"fileName": "cat.gif", "contentType": "image/gif", "sizeBytes": 10},
            415,
            "unsupported_media_type",
            "only JPEG, PNG and PDF files and voice clips can be uploaded",
        ),
        (
            {"fileName": "big.pdf", "contentType": "application/pdf", "sizeBytes": MAX_BYTES + 1},
            413,
            "payload_too_large",
            "uploads can be at most 25 MB",
        ),
        (
            {"fileName": "none.png", "contentType": "image/png", "sizeBytes": 0},
            400,
            "invalid_request",
            "at least 1 byte",
        ),
        (
            {"fileName": "", "contentType": "image/png", "sizeBytes": 10},
            400,
            "invalid_request",
            "fileName must not be empty",
        ),
        (
            {"fileName": "x" * 300 + ".png", "contentType": "image/png", "sizeBytes": 10},
            400,
            "invalid_request",
            "fileName must be at most 255 characters",
        ),
        (
            {"fileName": "a.png", "contentType": "image/png", "sizeBytes": "10"},
            400,
            "invalid_request",
            "sizeBytes",
        ),
        (
            {"fileName": "a.png", "contentType": "image/png", "sizeBytes": 10.5},
            400,
            "invalid_request",
            "sizeBytes",
        ),
        ({"fileName": "a.png", "contentType": "image/png"}, 400, "invalid_request", "sizeBytes"),
        (
            {"fileName": "a.png", "contentType": "image/png", "sizeBytes": 1, "path": "x"},
            400,
            "invalid_request",
            "path",
        ),
        (["a.png"], 400, "invalid_request", "JSON object"),
    ],
)
@pytest.mark.leaves_steps("uploads never call the model")
async def test_post_upload_bad_bodies_are_clear_4xx_and_start_nothing(
    client: httpx.AsyncClient,
    harness: Harness,
    body: object,
    status: int,
    code: str,
    words: str,
) -> None:
    response = await client.post(UPLOADS, headers=ALICE_AUTH, json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert words in error["message"]
    assert harness.fakes.files.sessions == {}


@pytest.mark.leaves_steps("uploads never call the model")
async def test_post_upload_needs_a_token_and_post(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    body = {"fileName": "a.png", "contentType": "image/png", "sizeBytes": 10}
    response = await client.post(UPLOADS, json=body)
    assert response.status_code == 401
    forged = await client.post(UPLOADS, headers={"Authorization": "Bearer forged"}, json=body)
    assert forged.status_code == 401
    wrong = await client.get(UPLOADS, headers=ALICE_AUTH)
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "POST"
    assert harness.fakes.files.sessions == {}


@pytest.mark.leaves_steps("uploads never call the model")
async def test_post_upload_paths_are_the_callers_own(
    client: httpx.AsyncClient, harness: Harness
) -> None:
    body = {"fileName": "a.png", "contentType": "image/png", "sizeBytes": 10}
    bob = await client.post(UPLOADS, headers={"Authorization": "Bearer bob-token"}, json=body)
    assert bob.json()["storagePath"].startswith("bob/uploads/")
    without_origin = harness.fakes.files.sessions[bob.json()["uploadUrl"]]
    assert without_origin.origin is None


async def test_post_upload_counts_each_users_daily_allowance_and_refuses_past_it() -> None:
    clock = ManualClock()
    harness = make_service(ScriptedProvider([]), clock=clock, daily_uploads_per_user=2)
    body = {"fileName": "a.png", "contentType": "image/png", "sizeBytes": 10}
    bad = {"fileName": "a.gif", "contentType": "image/gif", "sizeBytes": 10}
    async with serving(api_of(harness)) as client:

        async def post(token: str, json: object = body) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"}
            return await client.post(UPLOADS, headers=headers, json=json)

        assert (await post("alice-token", bad)).status_code == 415  # a refusal costs nothing
        assert [(await post("alice-token")).status_code for _ in range(2)] == [201, 201]
        refused = await post("alice-token")
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limited"
        assert "today's allowance of 2 files" in refused.json()["error"]["message"]
        assert int(refused.headers["Retry-After"]) == 24 * 3600 + 1  # until midnight (UTC)
        assert len(harness.fakes.files.sessions) == 2  # the refused one started nothing
        assert (await post("bob-token")).status_code == 201  # each user has their own
        await clock.advance(24 * 3600)
        assert (await post("alice-token")).status_code == 201  # a new day
