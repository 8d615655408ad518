"""The ``FileStore`` contract, held by the in-memory fake and by the Cloud Storage
adapter against the local Storage emulator alike."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator

import pytest

from shared.errors import NotFound, PayloadTooLarge
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
