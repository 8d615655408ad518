"""What the model is shown of a conversation's attachments (DESIGN §9).

Images go to the model as image input (``ImagePart``, base64) and PDFs as their
extracted text with ``--- Page N ---`` markers, newest first, within a budget per model
call: at most ``images`` images of ``image_bytes`` in all, and ``text_chars`` of PDF
text (a PDF past the budget is cut, with a note). Older attachments stay in the history
as references, so the model can still name them (and pass them to ``review_work``).

``choose`` is pure: it decides from the stored references alone (sizes and lengths are
on each ``FileRef``) what to load. ``FileLoader`` does the reading, once per run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shared.attachments.pdf import has_text
from shared.errors import SparkError
from shared.llm.base import ImagePart
from shared.schemas.documents import FileRef, Message
from shared.store.files import FileStore

log = logging.getLogger(__name__)

# A PDF is shown only if at least this much of its text fits what is left of the budget.
_MIN_TEXT_CHARS = 1000


@dataclass(frozen=True, slots=True)
class AttachmentBudget:
    """What one model call may be shown of the attachments (``Settings`` holds it)."""

    images: int
    image_bytes: int
    text_chars: int


@dataclass(frozen=True, slots=True)
class Wanted:
    """A file to show the model: an image whole, or a PDF's text up to ``chars``."""

    ref: FileRef
    chars: int = 0

    @property
    def path(self) -> str:
        return self.ref.text_path or self.ref.storage_path


@dataclass(frozen=True, slots=True)
class PdfExcerpt:
    """The first characters of a PDF's text, and how many it has in all."""

    text: str
    total_chars: int


Shown = ImagePart | PdfExcerpt | None
"""What was loaded for a file (``None``: it could not be loaded)."""


def attachments(message: Message) -> list[FileRef]:
    """The files attached to a user message, in order."""
    return [part.file for part in message.content if part.file is not None]


def is_pdf(ref: FileRef) -> bool:
    return ref.content_type == "application/pdf"


def is_audio(ref: FileRef) -> bool:
    """A voice clip: the model reads its transcript (the message's text), never its bytes."""
    return ref.content_type.startswith("audio/")


def choose(messages: Sequence[Message], budget: AttachmentBudget) -> list[Wanted]:
    """The attachments of ``messages`` to show, newest first, within ``budget``."""
    wanted: list[Wanted] = []
    images = image_bytes = chars = 0
    for message in reversed(messages):
        if message.role != "user":
            continue
        for ref in reversed(attachments(message)):
            if is_audio(ref):
                continue
            if is_pdf(ref):
                left = budget.text_chars - chars
                need = ref.text_chars or 0
                if ref.text_path is None or need == 0:
                    continue  # no text file to load (never so for a PDF we prepared)
                if need <= left or left >= _MIN_TEXT_CHARS:
                    take = min(need, left)
                    wanted.append(Wanted(ref, take))
                    chars += take
            elif images < budget.images and image_bytes + ref.size_bytes <= budget.image_bytes:
                wanted.append(Wanted(ref))
                images += 1
                image_bytes += ref.size_bytes
    return wanted


class FileLoader:
    """Reads the files a run shows the model, each once (a run calls the model several
    times with much the same history)."""

    def __init__(self, files: FileStore) -> None:
        self.files = files
        self._loaded: dict[tuple[str, int], Shown] = {}

    async def load(self, wanted: Sequence[Wanted]) -> dict[str, Shown]:
        """What each wanted file shows, by its ``storage_path``; a file that is gone or
        cannot be read shows ``None`` (the history says so; the run goes on)."""
        shown: dict[str, Shown] = {}
        for one in wanted:
            key = (one.path, one.chars)
            if key not in self._loaded:
                self._loaded[key] = await self._read(one)
            shown[one.ref.storage_path] = self._loaded[key]
        return shown

    async def _read(self, one: Wanted) -> Shown:
        ref = one.ref
        try:
            if is_pdf(ref):
                # Only the excerpt's bytes (UTF-8: at most 4 a character); the whole
                # text's length is on the reference.
                data = await self.files.head(one.path, 4 * one.chars)
                text = data.decode("utf-8", errors="replace")[: one.chars]
                return PdfExcerpt(text, ref.text_chars or len(text))
            # Derived files are ours and bounded; the cap only guards against surprises.
            data = await self.files.read(one.path, ref.size_bytes + 1024)
        except SparkError as exc:
            log.warning("attachment %s not loaded: %s", one.path, type(exc).__name__)
            return None
        return ImagePart.of(ref.content_type, data)


def describe(ref: FileRef, shown: Mapping[str, Shown]) -> tuple[str, ImagePart | None]:
    """The note a user turn carries for one attachment, and the image it shows."""
    name = ref.name or ref.storage_path.rsplit("/", 1)[-1]
    where = f'file "{ref.storage_path}"'
    if is_audio(ref):
        seconds = f", {ref.duration_seconds:.0f} s" if ref.duration_seconds else ""
        return f'[Voice message: "{name}"{seconds}, {where}; its transcript is above.]', None
    if ref.storage_path not in shown:
        kind = "PDF" if is_pdf(ref) else "Image"
        return (
            f'[{kind} attached earlier: "{name}", {where}; not shown again, to keep '
            "within the model's limits.]",
            None,
        )
    loaded = shown[ref.storage_path]
    if loaded is None:
        return f'[Attachment "{name}", {where}: it could not be loaded just now.]', None
    if isinstance(loaded, ImagePart):
        size = f", {ref.width}×{ref.height}" if ref.width and ref.height else ""
        return f'[Image attached: "{name}"{size}, {where}; it is shown below.]', loaded
    pages = f", {ref.page_count} page{'s' if ref.page_count != 1 else ''}"
    rest = loaded.total_chars - len(loaded.text)
    if not rest and not has_text(loaded.text):
        return (
            f'[PDF attached: "{name}"{pages}, {where}; it has no text that could be '
            "extracted (it may be scanned pages).]",
            None,
        )
    head = f'[PDF attached: "{name}"{pages}, {where}; its text follows.]\n'
    tail = f'\n[End of "{name}".]'
    if rest > 0:
        tail = f'\n[The rest of "{name}" ({rest} more characters) is left out here.]'
    return head + loaded.text + tail, None
