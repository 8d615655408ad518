"""Checking a message's attachments and deriving what the model reads from them.

Two steps, both before anything of the message is written. ``Attachments.check``
judges *every* attachment (count, no path twice, path, existence, size from the
metadata, type from the first bytes) without downloading any. ``Attachments.derive``
then reads each and derives what it needs in memory (a normalised JPEG, a PDF's text),
and only when all of them succeeded writes the derived files beside the originals.
``Agent.send`` runs its own refusals (a user limit, a busy conversation) between the
two, so a refused send costs no download and no decode. A bad file is a clear 4xx
naming it and the rule it broke, and nothing is written.

Deriving is the costly part: a small PNG of many pixels (under the pixel limit) takes a
large share of an instance's CPU and memory to normalise (docs/concepts/attachments.md
gives the figures; bench/attachments.py times it). It runs in a worker thread, so the
process's other streams go on (in the event loop it held every stream of the process for
the whole decode), and at most ``decodes_at_once`` files are read and made ready at once
in a process, which bounds the memory they take.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from shared.attachment_rules import (
    ACCEPTED,
    MAX_ATTACHMENTS,
    MAX_BYTES,
    NORMALISED_SUFFIX,
    SNIFF_BYTES,
    TEXT_SUFFIX,
    file_name,
    path_problem,
    size_text,
    sniff,
)
from shared.attachments.images import NotAnImage, TooManyPixels, normalise
from shared.attachments.pdf import MAX_PAGES, PdfUnreadable, extract_text
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

_T = TypeVar("_T")
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
class Checked:
    """An attachment that met every rule judged without reading it."""

    info: FileInfo
    media_type: str


@dataclass(frozen=True, slots=True)
class _Derived:
    part: ContentPart
    path: str
    data: bytes
    content_type: str


def _name(info: FileInfo) -> str:
    """What the file's owner calls it: the name they uploaded it as, or its path's."""
    return info.name or file_name(info.path)


def _label(path: str, name: str | None = None) -> str:
    return f"The attachment {name or file_name(path)!r}"


class Attachments:
    """Checks and prepares attachments on one ``FileStore``."""

    def __init__(self, files: FileStore, decodes_at_once: int = 1) -> None:
        self.files = files
        self._decodes = asyncio.Semaphore(decodes_at_once)

    async def prepare(self, user_id: str, requested: Sequence[Requested]) -> list[ContentPart]:
        """The content parts of a message's attachments, their derived files written
        (``check`` then ``derive``)."""
        return await self.derive(await self.check(user_id, requested))

    async def check(self, user_id: str, requested: Sequence[Requested]) -> list[Checked]:
        """Every rule that can be judged without reading the files, for all of them.

        Raises:
            RequestError: more than ``MAX_ATTACHMENTS``, or one path twice.
            Forbidden: a path outside the sender's ``{uid}/uploads/``.
            NotFound: no file at a path.
            PayloadTooLarge: a file over 25 MB.
            UnsupportedMediaType: a type we do not accept, or bytes that are not the
                type claimed.
        """
        if len(requested) > MAX_ATTACHMENTS:
            raise RequestError(f"A message can carry at most {MAX_ATTACHMENTS} attachments.")
        seen: set[str] = set()
        for one in requested:
            if one.storage_path in seen:
                raise RequestError(
                    f"{_label(one.storage_path)} is attached more than once; attach each file once."
                )
            seen.add(one.storage_path)
        return [await self._check(user_id, one) for one in requested]

    async def derive(self, checked: Sequence[Checked]) -> list[ContentPart]:
        """Read and make ready each checked attachment; only when all succeeded, write
        the derived files.

        Raises:
            PayloadTooLarge: an image with too many pixels.
            UnprocessableContent: an encrypted or damaged PDF, an undecodable image.
        """
        derived = [await self._derive(one) for one in checked]
        for one in derived:
            await self.files.write(one.path, one.data, one.content_type)
        return [one.part for one in derived]

    async def _check(self, user_id: str, requested: Requested) -> Checked:
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
        label = _label(path, info.name)
        if info.size_bytes > MAX_BYTES:
            raise PayloadTooLarge(
                f"{label} is {size_text(info.size_bytes)} ({info.size_bytes:,} bytes); "
                f"attachments can be at most {size_text(MAX_BYTES)}."
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
        return Checked(info, real)

    async def _derive(self, checked: Checked) -> _Derived:
        # The slot is held from the download on: the bytes are memory too.
        async with self._decodes:
            data = await self.files.read(checked.info.path, MAX_BYTES)
            if checked.media_type == "application/pdf":
                return await self._pdf(checked.info, data)  # a child process of its own
            return await self._image(checked.info, data)

    async def _image(self, info: FileInfo, data: bytes) -> _Derived:
        path, label = info.path, _label(info.path, info.name)
        try:
            image = await _in_thread(normalise, data)
        except TooManyPixels:
            raise PayloadTooLarge(
                f"{label} has too many pixels (at most 40 megapixels); upload a smaller image."
            ) from None
        except NotAnImage:
            raise UnprocessableContent(
                f"{label} could not be read as an image; it may be damaged."
            ) from None
        target = path + NORMALISED_SUFFIX
        ref = FileRef(
            storage_path=target,
            content_type="image/jpeg",
            size_bytes=len(image.data),
            name=_name(info),
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
            raise UnprocessableContent(
                f"{_label(info.path, info.name)} cannot be used: {problem}."
            ) from None
        target = info.path + TEXT_SUFFIX
        ref = FileRef(
            storage_path=info.path,
            content_type="application/pdf",
            size_bytes=info.size_bytes,
            name=_name(info),
            page_count=pdf.page_count,
            text_path=target,
            text_chars=len(pdf.text),
        )
        body = pdf.text.encode("utf-8")
        return _Derived(
            ContentPart(type="file", file=ref), target, body, "text/plain; charset=utf-8"
        )


async def _in_thread(work: Callable[[bytes], _T], data: bytes) -> _T:
    """``work(data)`` in a worker thread. Cancelled, it still waits for the thread (which
    cannot be stopped) to end, so the caller's decode slot is not freed while it runs."""
    running = asyncio.ensure_future(asyncio.to_thread(work, data))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait([running])
        if not running.cancelled():
            running.exception()  # retrieved: nobody is left to see it
        raise


__all__ = ["MAX_PAGES", "Attachments", "Checked", "Requested"]
