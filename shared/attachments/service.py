"""Checking a message's attachments and deriving what the model reads from them.

``Attachments.prepare`` runs before anything of the message is written: it checks
*every* attachment first (path, existence, size from the metadata, type from the first
bytes) without downloading any, then derives what each needs in memory (a normalised
JPEG, a PDF's text), and only when all of them succeeded writes the derived files
beside the originals. A bad file is a clear 4xx naming it and the rule it broke, and
nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.attachments.images import NotAnImage, TooManyPixels, normalise
from shared.attachments.pdf import MAX_PAGES, PdfUnreadable, extract_text
from shared.attachments.rules import (
    ACCEPTED,
    MAX_ATTACHMENTS,
    MAX_BYTES,
    NORMALISED_SUFFIX,
    SNIFF_BYTES,
    TEXT_SUFFIX,
    file_name,
    path_problem,
    sniff,
)
from shared.errors import (
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RequestError,
    UnprocessableContent,
    UnsupportedMediaType,
)
from shared.schemas.documents import ContentPart, FileRef
from shared.store.files import FileInfo, FileStore

_MB = 1024 * 1024
_PDF_PROBLEMS = {
    "encrypted": "it is encrypted (password-protected); upload a copy without a password",
    "malformed": "it is damaged or not a valid PDF",
    "timeout": "reading its text took too long",
}


@dataclass(frozen=True, slots=True)
class Requested:
    """An attachment as the client described it."""

    storage_path: str
    content_type: str
    size_bytes: int


@dataclass(frozen=True, slots=True)
class _Checked:
    info: FileInfo
    media_type: str


@dataclass(frozen=True, slots=True)
class _Derived:
    part: ContentPart
    path: str
    data: bytes
    content_type: str


def _label(path: str) -> str:
    return f"The attachment {file_name(path)!r}"


class Attachments:
    """Checks and prepares attachments on one ``FileStore``."""

    def __init__(self, files: FileStore) -> None:
        self.files = files

    async def prepare(self, user_id: str, requested: Sequence[Requested]) -> list[ContentPart]:
        """The content parts of a message's attachments, their derived files written.

        Raises:
            RequestError: more than ``MAX_ATTACHMENTS``.
            Forbidden: a path outside the sender's ``{uid}/uploads/``.
            NotFound: no file at a path.
            PayloadTooLarge: a file over 25 MB, or an image with too many pixels.
            UnsupportedMediaType: a type we do not accept, or bytes that are not the
                type claimed.
            UnprocessableContent: an encrypted or damaged PDF, an undecodable image.
        """
        if len(requested) > MAX_ATTACHMENTS:
            raise RequestError(f"A message can carry at most {MAX_ATTACHMENTS} attachments.")
        checked = [await self._check(user_id, one) for one in requested]
        derived = [await self._derive(one) for one in checked]
        for one in derived:
            await self.files.write(one.path, one.data, one.content_type)
        return [one.part for one in derived]

    async def _check(self, user_id: str, requested: Requested) -> _Checked:
        path = requested.storage_path
        label = _label(path)
        problem = path_problem(user_id, path)
        if problem is not None:
            raise Forbidden(f"{label} cannot be used: {problem}.")
        if requested.content_type not in ACCEPTED:
            raise UnsupportedMediaType(
                f"{label} is {requested.content_type!r}; only JPEG, PNG and PDF files "
                "can be attached."
            )
        info = await self.files.stat(path)
        if info is None:
            raise NotFound(f"{label} was not found; upload it again.")
        if info.size_bytes > MAX_BYTES:
            raise PayloadTooLarge(
                f"{label} is {info.size_bytes / _MB:.1f} MB; "
                f"attachments can be at most {MAX_BYTES // _MB} MB."
            )
        if info.size_bytes != requested.size_bytes:
            raise RequestError(
                f"{label} is {info.size_bytes} bytes, not the {requested.size_bytes} "
                "given in sizeBytes; upload it again."
            )
        real = sniff(await self.files.head(path, SNIFF_BYTES))
        if real is None:
            raise UnsupportedMediaType(
                f"{label} is not a JPEG, PNG or PDF file (judged by its contents)."
            )
        if real != requested.content_type:
            raise UnsupportedMediaType(
                f"{label} was sent as {requested.content_type} but its contents are "
                f"{real}; a file's type must match what it is."
            )
        return _Checked(info, real)

    async def _derive(self, checked: _Checked) -> _Derived:
        path = checked.info.path
        data = await self.files.read(path, MAX_BYTES)
        if checked.media_type == "application/pdf":
            return await self._pdf(checked.info, data)
        try:
            image = normalise(data)
        except TooManyPixels:
            raise PayloadTooLarge(
                f"{_label(path)} has too many pixels (at most 40 megapixels); "
                "upload a smaller image."
            ) from None
        except NotAnImage:
            raise UnprocessableContent(
                f"{_label(path)} could not be read as an image; it may be damaged."
            ) from None
        target = path + NORMALISED_SUFFIX
        ref = FileRef(
            storage_path=target,
            content_type="image/jpeg",
            size_bytes=len(image.data),
            name=file_name(path),
            original_path=path,
            width=image.width,
            height=image.height,
        )
        return _Derived(ContentPart(type="image", file=ref), target, image.data, "image/jpeg")

    async def _pdf(self, info: FileInfo, data: bytes) -> _Derived:
        try:
            pdf = await extract_text(data)
        except PdfUnreadable as exc:
            problem = _PDF_PROBLEMS.get(exc.kind, "it could not be read")
            raise UnprocessableContent(f"{_label(info.path)} cannot be used: {problem}.") from None
        target = info.path + TEXT_SUFFIX
        ref = FileRef(
            storage_path=info.path,
            content_type="application/pdf",
            size_bytes=info.size_bytes,
            name=file_name(info.path),
            page_count=pdf.page_count,
            text_path=target,
            text_chars=len(pdf.text),
        )
        body = pdf.text.encode("utf-8")
        return _Derived(
            ContentPart(type="file", file=ref), target, body, "text/plain; charset=utf-8"
        )


__all__ = ["MAX_PAGES", "Attachments", "Requested"]
