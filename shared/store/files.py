"""Uploaded files: the ``FileStore`` interface and its in-memory fake.

Clients upload into Cloud Storage under their own prefix (``{uid}/uploads/…``) through
upload sessions the api starts for them (``start_upload``); the server reads what they
uploaded and writes what it derives from it beside the original (a normalised JPEG, a
PDF's text). ``CloudStorageFileStore``
(``shared/store/cloudstorage.py``) is the adapter; both are held to one contract
(``tests/e2e/test_file_store_contract.py``).
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Protocol

from shared.errors import NotFound, PayloadTooLarge, RequestError


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What the store knows of a file without reading it; ``name`` is the name its owner
    gave it, kept when its upload session was started (the path has a safe form)."""

    path: str
    content_type: str
    size_bytes: int
    name: str | None = None


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

    async def delete(self, path: str) -> None:
        """Remove the file at ``path``; none there is no error."""
        ...

    async def start_upload(
        self,
        path: str,
        content_type: str,
        size_bytes: int,
        origin: str | None,
        name: str | None = None,
    ) -> str:
        """Start an upload session for one file and return its URL, where a client
        ``PUT``s the bytes (no credentials needed: the URL is the permission).

        The session binds the file's ``path`` and ``content_type``, and its size: bytes
        of another size are refused. ``origin`` (a browser's ``Origin``) is the one
        origin whose requests the session URL answers with CORS headers. ``name`` (its
        owner's name for it) is kept with the file, and ``stat`` gives it back. Nothing
        is stored until the client uploads.
        """
        ...


def too_large(path: str, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"{path!r} is larger than {max_bytes} bytes.")


@dataclass(frozen=True, slots=True)
class UploadSession:
    """An upload the fake was asked to accept: one file, of this type and size."""

    path: str
    content_type: str
    size_bytes: int
    origin: str | None
    name: str | None = None


class InMemoryFileStore:
    """Files in a dict, for unit tests and offline runs. ``reads`` lists every path
    read in full, so tests can check that a refused file was never downloaded;
    ``sessions`` holds the upload sessions not yet used, by URL."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[bytes, str, str | None]] = {}
        self._lock = asyncio.Lock()
        self.reads: list[str] = []
        self.sessions: dict[str, UploadSession] = {}

    async def stat(self, path: str) -> FileInfo | None:
        async with self._lock:
            found = self._files.get(path)
        return None if found is None else FileInfo(path, found[1], len(found[0]), found[2])

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
        return await self._put(path, data, content_type, None)

    async def delete(self, path: str) -> None:
        async with self._lock:
            self._files.pop(path, None)

    async def _put(self, path: str, data: bytes, content_type: str, name: str | None) -> FileInfo:
        async with self._lock:
            self._files[path] = (bytes(data), content_type, name)
        return FileInfo(path, content_type, len(data), name)

    async def start_upload(
        self,
        path: str,
        content_type: str,
        size_bytes: int,
        origin: str | None,
        name: str | None = None,
    ) -> str:
        url = f"memory://uploads/{secrets.token_urlsafe(16)}"
        self.sessions[url] = UploadSession(path, content_type, size_bytes, origin, name)
        return url

    async def complete_upload(self, url: str, data: bytes) -> FileInfo:
        """What a client's ``PUT`` of ``data`` to a session URL does on Cloud Storage:
        the file is stored at the session's path with the session's content type
        (whatever type the client says) and name, once.

        Raises:
            NotFound: no such session, or it was used already.
            RequestError: ``data`` is not exactly the size the session was started for
                (Cloud Storage refuses it: the session's ``X-Upload-Content-Length``).
        """
        session = self.sessions.get(url)
        if session is None:
            raise NotFound("There is no upload session at this URL (or it was used).")
        if len(data) != session.size_bytes:
            raise RequestError(
                f"The upload is {len(data)} bytes, not the {session.size_bytes} "
                "its session was started for."
            )
        del self.sessions[url]
        return await self._put(session.path, data, session.content_type, session.name)

    def paths(self) -> list[str]:
        """Every stored path, sorted (for tests)."""
        return sorted(self._files)
