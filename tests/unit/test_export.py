"""A person's export (DESIGN §15) through the real app, on the in-package fakes: what
the zip holds, the one export per ten minutes, a parent's export of a dependent's."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import tracemalloc
import zipfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from spark_http.app import ApiApp
from starlette.requests import Request
from starlette.responses import StreamingResponse

from shared.auth.base import StaticTokenVerifier, User
from shared.clock import ManualClock
from shared.errors import StoreError
from shared.llm.scripted import ScriptedProvider
from shared.schemas.documents import (
    ArchiveMarker,
    ArchiveSegment,
    Author,
    ContentPart,
    Conversation,
    Lesson,
    Message,
    TaskDocument,
)
from shared.store.files import InMemoryFileStore
from tests.unit.helpers import Fakes, Harness, make_service, serving

NOW = datetime(2026, 1, 1, tzinfo=UTC)
USERS = {
    "mum": User(uid="mum", name="Mum"),
    "dad": User(uid="dad", name="Dad"),
    "sam": User(uid="sam", name="Sam"),
    "eve": User(uid="eve", name="Eve"),
}
EXPORT = "/api/spark/me/export"


def _get(path: str, token: str) -> Request:
    """A GET as the ASGI server hands it over (its body is read as a server sends it)."""
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
    }
    return Request(scope)


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {name}-token"}


def api_of(harness: Harness) -> ApiApp:
    verifier = StaticTokenVerifier({f"{k}-token": v for k, v in USERS.items()})
    return ApiApp(harness.agent, verifier, harness.settings)


def message(n: int, text: str, role: str = "user", author: Author | None = None) -> Message:
    return Message.model_validate(
        {
            "id": f"m{n:05d}",
            "role": role,
            "author": author,
            "createdAt": NOW + timedelta(seconds=n),
            "status": "complete",
            "content": [ContentPart.of_text(text)],
        }
    )


async def archived_conversation(
    fakes: Fakes, uid: str, conversation_id: str, counts: list[int], live: int, size: int = 40
) -> list[str]:
    """A conversation whose older messages rolled over into ``len(counts)`` segments (of
    ``counts[i]`` messages each), ``live`` more in the live document, and a stray segment
    past the marker (a move that died after writing it: its messages are the live
    document's first ones). Returns every message's text, in order."""
    texts, segments, n = [], [], 0
    for number, count in enumerate(counts, start=1):
        moved = []
        for _ in range(count):
            texts.append(f"{conversation_id} says {n} " + "x" * size)
            moved.append(message(n, texts[-1], "user" if n % 2 == 0 else "assistant"))
            n += 1
        segments.append(
            ArchiveSegment(
                conversation_id=conversation_id, segment=number, messages=moved, created_at=NOW
            )
        )
    kept = []
    for _ in range(live):
        texts.append(f"{conversation_id} says {n} " + "x" * size)
        kept.append(message(n, texts[-1], "user" if n % 2 == 0 else "assistant"))
        n += 1
    marker = (
        ArchiveMarker(count=n - live, newest_id=f"m{n - live - 1:05d}", segments=len(counts))
        if counts
        else None
    )
    conversation = Conversation(
        id=conversation_id,
        participant_ids=[uid],
        title=f"About {conversation_id}",
        created_at=NOW,
        updated_at=NOW,
        last_message_at=NOW,
        messages=kept,
        archived=marker,
    )
    await fakes.store.create(uid, conversation)
    for segment in segments:
        await fakes.store.archive(uid, segment)
    stray = ArchiveSegment(
        conversation_id=conversation_id, segment=len(counts) + 1, messages=kept[:1], created_at=NOW
    )
    await fakes.store.archive(uid, stray)
    return texts


def lesson(n: int, title: str, version: int = 1) -> Lesson:
    body = f"<lesson><title>{title}</title><p>Part {n}</p></lesson>"
    return Lesson(
        id=f"lesson{n}", title=title, body=body, version=version, created_at=NOW, updated_at=NOW
    )


def section(task_id: str, conversation_id: str) -> TaskDocument:
    return TaskDocument(
        id=task_id,
        conversation_id=conversation_id,
        tool_call_id="call_1",
        tool="plan_lessons",
        title="Planning a week of fractions",
        status="completed",
        created_at=NOW,
        updated_at=NOW,
        summary="Five lessons planned.",
    )


async def a_family(harness: Harness) -> str:
    """Mum's family: Dad a parent, Sam a dependent (Eve belongs to none)."""
    families = harness.agent.families
    family = await families.create(USERS["mum"], "The Smiths")
    for who, role in (("dad", "parent"), ("sam", "dependent")):
        invite = await families.invite("mum", family.id, role)
        await families.join(USERS[who], invite.token)
    return family.id


async def an_account(harness: Harness) -> dict[str, object]:
    """Mum's data in every store (and some of others', which her export must leave out)."""
    fakes = harness.fakes
    texts = await archived_conversation(fakes, "mum", "conv_a", [3, 2], live=2)
    family_note = Author(user_id="dad", display_name="Dad", role="parent")
    direct = Conversation(
        id="conv_direct",
        kind="direct",
        participant_ids=["mum", "dad"],
        created_at=NOW,
        updated_at=NOW,
        last_message_at=NOW,
        messages=[message(1, "Home by six?", author=family_note)],
    )
    await fakes.store.create("mum", direct)
    await archived_conversation(fakes, "dad", "conv_dads", [2], live=1)
    await fakes.lessons.create("mum", lesson(1, "Fractions"))
    await fakes.lessons.replace("mum", lesson(1, "Fractions, revised", 2), 1)
    await fakes.lessons.replace("mum", lesson(1, "Fractions, final", 3), 2)
    await fakes.lessons.create("dad", lesson(9, "Dad's lesson"))
    fakes.sections.put("mum", {"task_1": section("task_1", "conv_a")})
    fakes.sections.put("dad", {"task_9": section("task_9", "conv_dads")})
    await harness.agent.update_settings("mum", ai_reads_family_messages=False)
    family_id = await a_family(harness)
    photo = bytes(range(256)) * 2000  # 512 KB: streamed in several pieces
    await fakes.files.write("mum/uploads/u1/photo.jpg", photo, "image/jpeg")
    await fakes.files.write("mum/uploads/u2/notes.pdf", b"%PDF-1.4 notes", "application/pdf")
    await fakes.files.write("dad/uploads/u3/dads.jpg", b"dad's photo", "image/jpeg")
    return {"texts": texts, "photo": photo, "family_id": family_id}


@pytest.fixture
def harness() -> Harness:
    return make_service(ScriptedProvider([]), clock=ManualClock(NOW))


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(api_of(harness)) as client:
        yield client


def unzipped(response: httpx.Response) -> zipfile.ZipFile:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    assert response.headers["content-disposition"].startswith("attachment;")
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert archive.testzip() is None  # every member's checksum holds
    return archive


async def test_export_holds_every_part_of_an_account(
    harness: Harness, client: httpx.AsyncClient
) -> None:
    account = await an_account(harness)
    archive = unzipped(await client.get(EXPORT, headers=auth("mum")))

    assert sorted(archive.namelist()) == [
        "README.txt",
        "conversations/conv_a.json",
        "conversations/conv_a.md",
        "conversations/conv_direct.json",
        "conversations/conv_direct.md",
        "family.json",
        "feedback.json",
        "files/u1/photo.jpg",
        "files/u2/notes.pdf",
        "lessons/lesson1.json",
        "settings.json",
        "tasks/task_1.json",
    ]
    # The archive merged back, in order, each message once (the stray segment skipped).
    conversation = json.loads(archive.read("conversations/conv_a.json"))
    assert conversation["title"] == "About conv_a"
    texts = [m["content"][0]["text"] for m in conversation["messages"]]
    assert texts == account["texts"]
    readable = archive.read("conversations/conv_a.md").decode()
    assert readable.startswith("# About conv_a\n")
    positions = [readable.index(text) for text in account["texts"]]  # type: ignore[attr-defined]
    assert positions == sorted(positions)
    assert "## You ·" in readable and "## Spark AI Agent ·" in readable
    assert "## Dad ·" in archive.read("conversations/conv_direct.md").decode()

    kept = json.loads(archive.read("lessons/lesson1.json"))
    assert (kept["lesson"]["title"], kept["lesson"]["version"]) == ("Fractions, final", 3)
    assert [v["version"] for v in kept["versions"]] == [2, 1]
    assert kept["versions"][1]["title"] == "Fractions"
    task = json.loads(archive.read("tasks/task_1.json"))
    assert (task["title"], task["summary"]) == (
        "Planning a week of fractions",
        "Five lessons planned.",
    )
    assert json.loads(archive.read("settings.json"))["aiReadsFamilyMessages"] is False

    family = json.loads(archive.read("family.json"))["family"]
    assert (family["name"], family["myRole"]) == ("The Smiths", "parent")
    assert family["members"] == [
        {"displayName": "Mum", "role": "parent", "you": True},
        {"displayName": "Dad", "role": "parent", "you": False},
        {"displayName": "Sam", "role": "dependent", "you": False},
    ]
    assert "dad" not in json.dumps(family) and "sam" not in json.dumps(family)

    assert archive.read("files/u1/photo.jpg") == account["photo"]
    assert archive.read("files/u2/notes.pdf") == b"%PDF-1.4 notes"
    # Streamed in pieces: no file was read whole.
    assert harness.fakes.files.reads == []
    readme = archive.read("README.txt").decode()
    assert "What is left out, and why" in readme and "Other people's data" in readme


async def test_a_second_export_within_ten_minutes_is_429_and_changes_nothing(
    harness: Harness, client: httpx.AsyncClient
) -> None:
    await an_account(harness)
    assert (await client.get(EXPORT, headers=auth("mum"))).status_code == 200
    ledger = await harness.fakes.ledger.get("mum")

    clock = harness.deps.clock
    assert isinstance(clock, ManualClock)
    await clock.advance(599)
    refused = await client.get(EXPORT, headers=auth("mum"))
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert (error["code"], error["retryAfter"]) == ("rate_limited", 1)
    assert "10 minutes" in error["message"]
    assert await harness.fakes.ledger.get("mum") == ledger
    # Another person's export is theirs to start.
    assert (await client.get(EXPORT, headers=auth("dad"))).status_code == 200

    await clock.advance(1)
    assert (await client.get(EXPORT, headers=auth("mum"))).status_code == 200


async def test_two_processes_cannot_both_start_an_export() -> None:
    """The verdict is the store's: two api processes over one store, asked at once,
    start one export between them."""
    fakes = Fakes()
    processes = [make_service(ScriptedProvider([]), fakes=fakes) for _ in range(2)]
    await an_account(processes[0])
    async with serving(api_of(processes[0])) as first, serving(api_of(processes[1])) as second:
        answers = await asyncio.gather(
            first.get(EXPORT, headers=auth("mum")), second.get(EXPORT, headers=auth("mum"))
        )
    assert sorted(a.status_code for a in answers) == [200, 429]


async def test_a_parent_exports_a_dependents_data_and_nobody_else_can(
    harness: Harness, client: httpx.AsyncClient
) -> None:
    family_id = (await an_account(harness))["family_id"]
    await archived_conversation(harness.fakes, "sam", "conv_sams", [2], live=1)
    await harness.fakes.files.write("sam/uploads/u9/drawing.png", b"a drawing", "image/png")
    member = f"/api/spark/families/{family_id}/members"

    archive = unzipped(await client.get(f"{member}/sam/export", headers=auth("dad")))
    assert "files/u9/drawing.png" in archive.namelist()
    assert "conversations/conv_sams.json" in archive.namelist()
    assert not any("conv_a" in name for name in archive.namelist())
    family = json.loads(archive.read("family.json"))["family"]
    assert family["myRole"] == "dependent"
    # What the parents allow is the dependent's to see (the defaults: none was set).
    assert family["controls"]["consent"] and family["controls"]["dailyTurns"] is None
    assert "updatedBy" not in family["controls"]

    refusals = [
        ("sam", f"{member}/mum/export", "member_not_found"),  # a dependent, for a parent
        ("mum", f"{member}/dad/export", "member_not_found"),  # a parent, for a parent
        ("mum", f"{member}/nobody/export", "member_not_found"),
        ("eve", f"{member}/sam/export", "family_not_found"),  # no family of hers
        ("mum", "/api/spark/families/fam_other/members/sam/export", "family_not_found"),
    ]
    for who, path, code in refusals:
        refused = await client.get(path, headers=auth(who))
        assert (refused.status_code, refused.json()["error"]["code"]) == (404, code), path
    # The ten minutes are the dependent's: another parent's ask waits for them.
    again = await client.get(f"{member}/sam/export", headers=auth("mum"))
    assert again.status_code == 429
    assert (await client.get(EXPORT, headers=auth("sam"))).status_code == 429


async def _peak_while_streaming(conversations: int, messages: int, files: int) -> int:
    """The most memory allocated at once while an export of an account of
    ``conversations`` × ``messages`` (in segments of 100) and ``files`` files of 300 KB
    streams through the app, its chunks taken and dropped as a server sends them."""
    fakes = Fakes()
    harness = make_service(ScriptedProvider([]), fakes=fakes)
    for c in range(conversations):
        counts = [100] * (messages // 100 - 1)
        await archived_conversation(fakes, "mum", f"conv_{c}", counts, live=100, size=400)
    for f in range(files):
        await fakes.files.write(
            f"mum/uploads/u{f}/scan.pdf", bytes([f]) * 300_000, "application/pdf"
        )
    api = api_of(harness)
    gc.collect()
    tracemalloc.start()
    try:
        response = await api(_get(EXPORT, "mum-token"))
        assert isinstance(response, StreamingResponse), response.body
        sent = 0
        async for chunk in response.body_iterator:
            sent += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sent > files * 300_000 // 1000  # the files went out (compressed)
    return peak


async def test_export_memory_does_not_grow_with_the_account() -> None:
    """Four times the messages and files, in four times the conversations, and the
    peak while streaming stays where it was: one segment and one file piece at a time."""
    small = await _peak_while_streaming(conversations=2, messages=300, files=4)
    large = await _peak_while_streaming(conversations=8, messages=1200, files=16)
    assert large < small * 1.5, (small, large)


class BrokenFiles(InMemoryFileStore):
    """A file store that fails half-way through a file (Cloud Storage unreachable)."""

    async def chunks(self, path: str, size: int) -> AsyncIterator[bytes]:
        yield b"the first piece"
        raise StoreError("Spark AI Agent could not reach its file storage right now.")


async def test_an_export_that_fails_on_our_side_can_be_tried_again_at_once() -> None:
    fakes = Fakes(files=BrokenFiles())
    harness = make_service(ScriptedProvider([]), fakes=fakes)
    await fakes.files.write("mum/uploads/u1/photo.jpg", b"a photo", "image/jpeg")
    api = api_of(harness)
    response = await api(_get(EXPORT, "mum-token"))
    assert isinstance(response, StreamingResponse)
    with pytest.raises(StoreError):
        async for _ in response.body_iterator:
            pass
    assert (await fakes.ledger.get("mum")).exported_at is None
    again = await api(_get(EXPORT, "mum-token"))
    assert isinstance(again, StreamingResponse) and again.status_code == 200
