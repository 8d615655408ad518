"""Uploaded files: the ``FileStore`` interface and its in-memory fake.

Clients upload into Cloud Storage under their own prefix (``{uid}/uploads/…``); the
server reads what they uploaded and writes what it derives from it beside the
original (a normalised JPEG, a PDF's text). ``CloudStorageFileStore``
(``shared/store/cloudstorage.py``) is the adapter; both are held to one contract
(``tests/e2e/test_file_store_contract.py``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from shared.errors import NotFound, PayloadTooLarge


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What the store knows of a file without reading it."""

    path: str
    content_type: str
    size_bytes: int


class FileStore(Protocol):
    """Files in one bucket, by path."""

    async def stat(self, path: str) -> FileInfo | None:
        """The file's metadata, or ``None`` when there is no such file (nothing is read)."""
        ...

    async def head(self, path: str, count: int) -> bytes:
        """The first ``count`` bytes of the file (fewer when it is shorter).

        Raises:
            NotFound: no such file.
        """
        ...

    async def read(self, path: str, max_bytes: int) -> bytes:
        """The whole file, refusing one bigger than ``max_bytes`` (at most
        ``max_bytes + 1`` bytes are ever fetched).

        Raises:
            NotFound: no such file.
            PayloadTooLarge: the file is bigger than ``max_bytes``.
        """
        ...

    async def write(self, path: str, data: bytes, content_type: str) -> FileInfo:
        """Store ``data`` at ``path`` (replacing any file there) with ``content_type``."""
        ...


def too_large(path: str, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"{path!r} is larger than {max_bytes} bytes.")


class InMemoryFileStore:
    """Files in a dict, for unit tests and offline runs. ``reads`` lists every path
    read in full, so tests can check that a refused file was never downloaded."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[bytes, str]] = {}
        self._lock = asyncio.Lock()
        self.reads: list[str] = []

    async def stat(self, path: str) -> FileInfo | None:
        async with self._lock:
            found = self._files.get(path)
        return None if found is None else FileInfo(path, found[1], len(found[0]))

    async def _data(self, path: str) -> bytes:
        async with self._lock:
            found = self._files.get(path)
        if found is None:
            raise NotFound(f"There is no file at {path!r}.")
        return found[0]

    async def head(self, path: str, count: int) -> bytes:
        return (await self._data(path))[:count]

    async def read(self, path: str, max_bytes: int) -> bytes:
        data = await self._data(path)
        self.reads.append(path)
        if len(data) > max_bytes:
            raise too_large(path, max_bytes)
        return data

    async def write(self, path: str, data: bytes, content_type: str) -> FileInfo:
        async with self._lock:
            self._files[path] = (bytes(data), content_type)
        return FileInfo(path, content_type, len(data))

    def paths(self) -> list[str]:
        """Every stored path, sorted (for tests)."""
        return sorted(self._files)
