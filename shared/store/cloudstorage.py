"""``FileStore`` on Cloud Storage (the only module that imports ``google.cloud.storage``).

One client per process (``connect``). The SDK is synchronous, so each call runs in a
worker thread. With ``STORAGE_EMULATOR_HOST`` set the SDK talks to the local emulator,
anonymously.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from google.api_core import exceptions as gexc

from shared.errors import NotFound
from shared.store.failures import unavailable
from shared.store.files import FileInfo, too_large

UNAVAILABLE = "Spark AI Agent could not reach its file storage right now; please try again."
# The custom metadata holding the name the owner gave an uploaded file.
NAME_KEY = "originalName"


def _missing(path: str) -> NotFound:
    return NotFound(f"There is no file at {path!r}.")


class CloudStorageFileStore:
    """Files in one Cloud Storage bucket.

    The client is made (and the SDK imported) in a worker thread on the first call:
    importing ``google.cloud.storage`` costs ~0.6 s of an instance's cold start
    (`python -X importtime`), and most requests never touch a file."""

    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self._bucket_name = bucket
        self._bucket_now: Any = None
        self._lock = threading.Lock()

    def _bucket(self) -> Any:
        """The bucket, made on first use (in a worker thread)."""
        with self._lock:
            if self._bucket_now is None:
                self._bucket_now = self._client.bucket(self._bucket_name)
            return self._bucket_now

    async def _call(self, path: str, work: Callable[[Any], Any]) -> Any:
        """``work(bucket)`` in a worker thread."""
        with unavailable(UNAVAILABLE):
            try:
                return await asyncio.to_thread(lambda: work(self._bucket()))
            except gexc.NotFound:
                raise _missing(path) from None

    async def stat(self, path: str) -> FileInfo | None:
        try:
            blob = await self._call(path, lambda bucket: bucket.get_blob(path))
        except NotFound:
            return None
        if blob is None:
            return None
        content_type = blob.content_type or "application/octet-stream"
        name = (blob.metadata or {}).get(NAME_KEY)
        return FileInfo(path, content_type, int(blob.size or 0), name)

    async def head(self, path: str, count: int) -> bytes:
        if count <= 0:
            return b""
        data: bytes = await self._call(
            path,
            lambda bucket: bucket.blob(path).download_as_bytes(
                start=0, end=count - 1, checksum=None
            ),
        )
        return data

    async def read(self, path: str, max_bytes: int) -> bytes:
        # One byte past the limit tells a file that is too big without fetching it all.
        data: bytes = await self._call(
            path,
            lambda bucket: bucket.blob(path).download_as_bytes(
                start=0, end=max_bytes, checksum=None
            ),
        )
        if len(data) > max_bytes:
            raise too_large(path, max_bytes)
        return data

    async def write(self, path: str, data: bytes, content_type: str) -> FileInfo:
        await self._call(
            path,
            lambda bucket: bucket.blob(path).upload_from_string(data, content_type=content_type),
        )
        return FileInfo(path, content_type, len(data))

    async def delete(self, path: str) -> None:
        with contextlib.suppress(NotFound):  # gone already: what was asked
            await self._call(path, lambda bucket: bucket.blob(path).delete())

    async def start_upload(
        self,
        path: str,
        content_type: str,
        size_bytes: int,
        origin: str | None,
        name: str | None = None,
    ) -> str:
        """A resumable upload session (``X-Upload-Content-Type``,
        ``X-Upload-Content-Length``, ``Origin``): Cloud Storage keeps its URL for a week.
        ``name`` goes in the object's custom metadata, sent with the session."""

        def start() -> str:
            blob = self._bucket().blob(path)
            if name is not None:
                blob.metadata = {NAME_KEY: name}
            url: str = blob.create_resumable_upload_session(
                content_type=content_type, size=size_bytes, origin=origin, checksum=None
            )
            return url

        # Not even NotFound is the caller's: it means the bucket is missing.
        with unavailable(UNAVAILABLE):
            return await asyncio.to_thread(start)

    def close(self) -> None:
        self._client.close()


class _FirstUseClient:
    """A ``storage.Client`` made (and its SDK imported) when a bucket is first asked for."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None

    def bucket(self, name: str) -> Any:
        if self._client is None:
            self._client = self._make()
        return self._client.bucket(name)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def connect(project_id: str, bucket: str, emulator_host: str | None) -> CloudStorageFileStore:
    """The store on ``bucket`` with one client for the process (anonymous on the emulator),
    made on its first call."""

    def client() -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage  # type: ignore[attr-defined]

        if emulator_host:
            return storage.Client(project=project_id, credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
        return storage.Client(project=project_id)

    return CloudStorageFileStore(_FirstUseClient(client), bucket)
