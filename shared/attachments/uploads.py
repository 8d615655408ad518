"""Upload sessions: where a client's file goes, and what it must be before it may go.

A client asks the api for a session for one file (``Uploads.start``), then ``PUT``s the
bytes to the session's URL, straight to Cloud Storage. The server picks the path,
``{uid}/uploads/{id}/{safe name}``, so nobody writes outside their own prefix or over
another file; the session binds that path, the content type and the exact size. The
file is judged again by its bytes when a message attaches it (``service.py``): the
type and size a client states here are only what it says.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from shared.attachment_rules import (
    DERIVED_SUFFIXES,
    MAX_BYTES,
    MAX_NAME_CHARS,
    UPLOADABLE,
    MediaType,
    audio_type,
    display_name,
    path_problem,
    size_text,
    uploads_prefix,
)
from shared.clock import Clock
from shared.errors import (
    INTERNAL_MESSAGE,
    PayloadTooLarge,
    RequestError,
    SparkError,
    UnsupportedMediaType,
)
from shared.ids import IdGenerator
from shared.store.files import FileStore

SAFE_NAME_CHARS = 100
"""The longest name the server gives a file (its extension included)."""

SESSION_LIFETIME = timedelta(days=7)
"""How long Cloud Storage keeps a resumable upload session's URL."""

EXTENSIONS: dict[MediaType, str] = {
    "image/jpeg": "jpg",
    "image/png": "png",
    "application/pdf": "pdf",
    "audio/webm": "webm",
    "audio/ogg": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/wav": "wav",
}

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_DOTS = re.compile(r"\.{2,}")
_EXTENSION = re.compile(r"[A-Za-z0-9]{1,10}")
# scheme://host[:port], as browsers send it; anything else ("null", a path) is not used.
_ORIGIN = re.compile(
    r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?"
)


@dataclass(frozen=True, slots=True)
class Upload:
    """A started upload session: ``PUT`` the file to ``url`` before ``expires_at``."""

    storage_path: str
    url: str
    content_type: MediaType
    size_bytes: int
    expires_at: datetime


def safe_name(name: str, media_type: MediaType) -> str:
    """``name`` made safe as the last part of a path: ASCII letters, digits, ``.``,
    ``-`` and ``_`` only (accents dropped, any other run of characters becomes ``_``),
    at most ``SAFE_NAME_CHARS``, with its extension (the type's when it has none), and
    never ending like a file the server derives (``….normalised.jpg``, ``….text.txt``).
    """
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem or not _EXTENSION.fullmatch(extension):
        stem, extension = name, EXTENSIONS[media_type]
    stem = unicodedata.normalize("NFKD", stem).encode("ascii", "ignore").decode()
    stem = _DOTS.sub(".", _UNSAFE.sub("_", stem)).strip("._-")
    stem = stem[: SAFE_NAME_CHARS - len(extension) - 1].rstrip("._-") or "file"
    safe = f"{stem}.{extension}"
    for suffix in DERIVED_SUFFIXES:
        if safe.endswith(suffix):
            safe = safe[: -len(suffix)] + "_" + suffix[1:]
    return safe


def browser_origin(header: str | None) -> str | None:
    """The request's ``Origin`` when it names one (``scheme://host[:port]``), else ``None``."""
    if header is None or len(header) > 255 or not _ORIGIN.fullmatch(header):
        return None
    return header


def checked_type(file_name: str, content_type: str, size_bytes: int) -> MediaType:
    """The accepted type of a file a client asks to upload.

    Raises:
        RequestError: an empty or too long name, or an empty file.
        UnsupportedMediaType: not JPEG, PNG, PDF or one of the audio types.
        PayloadTooLarge: more than 25 MB.
    """
    if not file_name.strip():
        raise RequestError("fileName must not be empty.")
    if len(file_name) > MAX_NAME_CHARS:
        raise RequestError(
            f"fileName must be at most {MAX_NAME_CHARS} characters; this one has {len(file_name)}."
        )
    label = f"The file {file_name!r}"
    media_type = next((t for t in UPLOADABLE if t == content_type), None) or audio_type(
        content_type
    )
    if media_type is None:
        raise UnsupportedMediaType(
            f"{label} is {content_type!r}; only JPEG, PNG and PDF files and voice clips "
            "can be uploaded (image/jpeg, image/png, application/pdf, audio/webm, "
            "audio/ogg, audio/mpeg, audio/mp4 or audio/wav)."
        )
    if size_bytes < 1:
        raise RequestError(
            f"{label} is empty (sizeBytes {size_bytes}); upload a file of at least 1 byte."
        )
    if size_bytes > MAX_BYTES:
        raise PayloadTooLarge(
            f"{label} is {size_text(size_bytes)} ({size_bytes:,} bytes); uploads can be at "
            f"most {size_text(MAX_BYTES)}."
        )
    return media_type


class UploadAllowance(Protocol):
    """Each user's daily allowance of upload sessions (``shared/budget``'s ``Budget``
    keeps it in the user's ledger, with their other daily allowances)."""

    async def admit_upload(self, user_id: str) -> None:
        """Count one session.

        Raises:
            RateLimited: today's uploads are used up; nothing was counted.
        """
        ...

    async def withdraw_uploads(self, user_id: str, count: int) -> None:
        """Give back ``count`` of today's sessions (files written, then removed)."""
        ...


class Uploads:
    """Starts upload sessions into the callers' own ``{uid}/uploads/``."""

    def __init__(
        self, files: FileStore, ids: IdGenerator, clock: Clock, allowance: UploadAllowance
    ) -> None:
        self._files = files
        self._ids = ids
        self._clock = clock
        self._allowance = allowance

    async def start(
        self,
        user_id: str,
        file_name: str,
        content_type: str,
        size_bytes: int,
        origin: str | None = None,
    ) -> Upload:
        """A session for one file at a fresh path under ``user_id``'s uploads; nothing
        is created when the file breaks a rule.

        Raises:
            RequestError: an empty or too long name, or an empty file.
            UnsupportedMediaType: not JPEG, PNG, PDF or one of the audio types.
            PayloadTooLarge: more than 25 MB.
            RateLimited: the user's uploads for today are used up.
            StoreError: Cloud Storage did not start the session.
        """
        media_type, path = self._fresh(user_id, file_name, content_type, size_bytes)
        await self._allowance.admit_upload(user_id)
        started = self._clock.now()
        url = await self._files.start_upload(
            path, media_type, size_bytes, browser_origin(origin), display_name(file_name)
        )
        return Upload(path, url, media_type, size_bytes, started + SESSION_LIFETIME)

    async def keep(self, user_id: str, file_name: str, content_type: str, data: bytes) -> str:
        """Write a file a client sent in its request (an AI SDK chat's file part) where an
        upload session would have put it, counted as one upload; its storage path, for
        the message's attachments to judge and read as any uploaded file.

        Raises:
            As ``start`` (but no session is started).
        """
        media_type, path = self._fresh(user_id, file_name, content_type, len(data))
        await self._allowance.admit_upload(user_id)
        await self._files.write(path, data, media_type)
        return path

    async def give_back(self, user_id: str, paths: Sequence[str]) -> None:
        """Undo ``keep`` for ``paths``, files of a send refused before its message was
        written: each removed and its upload given back to the day's count.

        Raises:
            StoreError: a file or the count could not be changed.
        """
        for path in paths:
            await self._files.delete([path])
        await self._allowance.withdraw_uploads(user_id, len(paths))

    def _fresh(
        self, user_id: str, file_name: str, content_type: str, size_bytes: int
    ) -> tuple[MediaType, str]:
        """The file's accepted type and a fresh path for it under the user's uploads."""
        media_type = checked_type(file_name, content_type, size_bytes)
        name = safe_name(file_name, media_type)
        path = f"{uploads_prefix(user_id)}{self._ids.new('upl')}/{name}"
        problem = path_problem(user_id, path)
        if problem is not None:  # a bug in safe_name: never hand out such a path
            raise SparkError(INTERNAL_MESSAGE, detail=f"upload path {path!r}: {problem}")
        return media_type, path
