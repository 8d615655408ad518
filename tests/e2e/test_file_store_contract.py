"""The ``FileStore`` contract, held by the in-memory fake and by the Cloud Storage
adapter against the local Storage emulator alike."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator

import httpx
import pytest

from shared.errors import NotFound, PayloadTooLarge, RequestError
from shared.store.cloudstorage import connect
from shared.store.files import FileInfo, FileStore, InMemoryFileStore
from tests.e2e.conftest import PROJECT

pytestmark = pytest.mark.emulator


@pytest.fixture(params=["memory", "cloudstorage"])
async def files(request: pytest.FixtureRequest) -> AsyncIterator[FileStore]:
    if request.param == "memory":
        yield InMemoryFileStore()
        return
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if not host:
        pytest.fail("the Cloud Storage contract needs the emulator: run it with `make test`")
    store = connect(PROJECT, f"{PROJECT}.appspot.com", host)
    yield store
    store.close()


def a_path(name: str = "work.png") -> str:
    return f"u{secrets.token_hex(4)}/uploads/{name}"


async def test_file_store_writes_then_stats_and_reads(files: FileStore) -> None:
    path = a_path("My homework (1).png")
    data = os.urandom(3000)
    written = await files.write(path, data, "image/png")
    assert written == FileInfo(path, "image/png", 3000)
    assert await files.stat(path) == FileInfo(path, "image/png", 3000)
    assert await files.read(path, 3000) == data
    assert await files.head(path, 8) == data[:8]
    assert await files.head(path, 10_000) == data


async def test_file_store_deletes_paths_and_a_prefix_and_again_is_no_error(
    files: FileStore,
) -> None:
    owner = f"u{secrets.token_hex(4)}"
    kept = [f"{owner}/uploads/kept.png", f"{owner}/speech/c2/m1"]
    gone = [f"{owner}/uploads/a.png", f"{owner}/speech/c1/m1", f"{owner}/speech/c1/m2"]
    for path in [*kept, *gone]:
        await files.write(path, b"x", "image/png")
    await files.delete([gone[0]], prefix=f"{owner}/speech/c1/")
    for path in gone:
        assert await files.stat(path) is None
    for path in kept:
        assert await files.stat(path) is not None
    await files.delete([gone[0]], prefix=f"{owner}/speech/c1/")  # again: nothing left


async def test_file_store_missing_file(files: FileStore) -> None:
    path = a_path()
    assert await files.stat(path) is None
    with pytest.raises(NotFound):
        await files.read(path, 100)
    with pytest.raises(NotFound):
        await files.head(path, 8)


async def test_file_store_read_refuses_past_its_cap(files: FileStore) -> None:
    path = a_path("big.pdf")
    await files.write(path, b"%PDF-" + b"x" * 995, "application/pdf")
    with pytest.raises(PayloadTooLarge):
        await files.read(path, 999)
    assert len(await files.read(path, 1000)) == 1000


async def test_file_store_write_replaces_with_new_type(files: FileStore) -> None:
    path = a_path("work.png.normalised.jpg")
    await files.write(path, b"one", "image/png")
    await files.write(path, b"second", "image/jpeg")
    assert await files.stat(path) == FileInfo(path, "image/jpeg", 6)
    assert await files.read(path, 100) == b"second"


# gcp-storage-emulator stores whatever one PUT to a session URL sends; Cloud Storage
# refuses bytes of another size than the session's X-Upload-Content-Length.
EMULATOR_TAKES_ANY_SIZE = (
    "gcp-storage-emulator does not enforce a session's declared size; Cloud Storage does "
    "(and the message API checks every attachment's size and bytes again)"
)


async def put(files: FileStore, url: str, data: bytes, content_type: str) -> bool:
    """A client's PUT of ``data`` to a session URL (a real HTTP request to the emulator;
    the fake's ``complete_upload``): whether the store took it."""
    if isinstance(files, InMemoryFileStore):
        try:
            await files.complete_upload(url, data)
        except RequestError:
            return False
        return True
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.put(url, content=data, headers={"Content-Type": content_type})
    return response.is_success


async def test_file_store_upload_session_takes_the_bytes_at_its_path(files: FileStore) -> None:
    path = a_path("upl_1-homework.png")
    data = b"\x89PNG\r\n\x1a\n" + os.urandom(2992)
    url = await files.start_upload(path, "image/png", 3000, "http://localhost:5173")
    assert url.startswith(("http://", "https://", "memory://"))
    assert await files.stat(path) is None  # nothing is stored until the client uploads
    assert await put(files, url, data, "image/png")
    assert await files.stat(path) == FileInfo(path, "image/png", 3000)
    assert await files.read(path, 3000) == data


async def test_file_store_upload_session_keeps_its_owners_name_for_the_file(
    files: FileStore,
) -> None:
    path = a_path("upl_3-My_homework.png")
    url = await files.start_upload(path, "image/png", 8, None, "My homework é.png")
    assert await put(files, url, b"\x89PNG\r\n\x1a\n", "image/png")
    assert await files.stat(path) == FileInfo(path, "image/png", 8, "My homework é.png")


async def test_file_store_upload_session_keeps_the_type_it_was_started_with(
    files: FileStore,
) -> None:
    path = a_path("upl_2-essay.pdf")
    url = await files.start_upload(path, "application/pdf", 9, None)
    assert await put(files, url, b"%PDF-1.7\n", "image/png")
    assert await files.stat(path) == FileInfo(path, "application/pdf", 9)


async def test_file_store_upload_session_refuses_another_size(
    files: FileStore, request: pytest.FixtureRequest
) -> None:
    if not isinstance(files, InMemoryFileStore):
        request.applymarker(pytest.mark.xfail(strict=True, reason=EMULATOR_TAKES_ANY_SIZE))
    path = a_path("upl_3-big.png")
    url = await files.start_upload(path, "image/png", 100, None)
    assert not await put(files, url, b"\x89PNG\r\n\x1a\n" + b"0" * 200, "image/png")
    assert await files.stat(path) is None


async def test_file_store_lists_a_prefix_a_page_at_a_time(files: FileStore) -> None:
    owner = f"u{secrets.token_hex(4)}"
    names = ["a/1.png", "a/2.pdf", "b/3.png", "c/4.webm", "d/5.png"]
    for n, name in enumerate(names):
        await files.write(f"{owner}/uploads/{name}", b"x" * (n + 1), "image/png")
    await files.write(f"{owner}/speech/c/m-v", b"audio", "audio/mpeg")
    await files.write(f"{owner}x/uploads/a/1.png", b"another's", "image/png")
    prefix = f"{owner}/uploads/"
    first = await files.listing(prefix, None, 2)
    assert first == [
        FileInfo(f"{prefix}a/1.png", "image/png", 1),
        FileInfo(f"{prefix}a/2.pdf", "image/png", 2),
    ]
    second = await files.listing(prefix, first[-1].path, 2)
    assert [f.path for f in second] == [f"{prefix}b/3.png", f"{prefix}c/4.webm"]
    last = await files.listing(prefix, second[-1].path, 2)
    assert [f.path for f in last] == [f"{prefix}d/5.png"]
    assert await files.listing(prefix, last[-1].path, 2) == []
    assert await files.listing(f"u{secrets.token_hex(4)}/uploads/", None, 2) == []


async def test_file_store_streams_a_file_in_pieces(files: FileStore) -> None:
    path = a_path("scan.pdf")
    data = os.urandom(2500)
    await files.write(path, data, "application/pdf")
    pieces = [piece async for piece in files.chunks(path, 1000)]
    assert [len(p) for p in pieces] == [1000, 1000, 500]
    assert b"".join(pieces) == data
    even = a_path("even.pdf")
    await files.write(even, data[:2000], "application/pdf")
    assert [len(p) async for p in files.chunks(even, 1000)] == [1000, 1000]
    with pytest.raises(NotFound):
        [piece async for piece in files.chunks(a_path("gone.pdf"), 1000)]


async def test_file_store_lists_and_deletes_under_a_prefix_in_pages(files: FileStore) -> None:
    """An erasure's pages (DESIGN §15): the files under one user's prefix, in path order,
    a page at a time, and nobody else's; deleting one already gone is no error."""
    user = f"u{secrets.token_hex(4)}"
    mine = [f"{user}/uploads/f{n}.png" for n in range(5)]
    for path in [*mine, f"{user}x/uploads/other.png"]:
        await files.write(path, b"png", "image/png")
    first = [f.path for f in await files.listing(f"{user}/", None, 3)]
    assert first == mine[:3]
    assert await files.delete([*first, f"{user}/uploads/never.png"]) == 3
    assert [f.path for f in await files.listing(f"{user}/", None, 3)] == mine[3:]
    assert await files.delete(mine) == 2
    assert await files.listing(f"{user}/", None, 3) == []
    assert await files.stat(f"{user}x/uploads/other.png") is not None
