"""PDF text for the model: extracted in a child process with a time limit.

At most ``MAX_PAGES`` pages are read (the rest are named in a note) and at most
``MAX_CHARS`` characters kept; each page's text follows a ``--- Page N ---`` marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from dataclasses import dataclass

MAX_PAGES = 50
MAX_CHARS = 200_000
TIMEOUT_SECONDS = 20.0


class PdfUnreadable(Exception):
    """Why a PDF could not be read: ``encrypted``, ``malformed`` or ``timeout``."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class PdfText:
    page_count: int
    text: str


def page_marker(number: int) -> str:
    return f"--- Page {number} ---"


_MARKS = re.compile(r"^--- Page \d+ ---$|^\[Pages \d+–\d+ were not read: .*\]$", re.MULTILINE)


def has_text(text: str) -> bool:
    """Whether ``with_markers`` text holds any words besides its markers and notes (a
    scanned PDF's pages are pictures: it has none)."""
    return bool(_MARKS.sub("", text).strip())


def with_markers(pages: list[str], page_count: int) -> str:
    """The pages' text, each after its marker, with a note for pages left unread."""
    blocks = [f"{page_marker(n)}\n{text.strip()}" for n, text in enumerate(pages, 1)]
    if page_count > len(pages):
        blocks.append(
            f"[Pages {len(pages) + 1}–{page_count} were not read: "
            f"at most {MAX_PAGES} pages of a PDF are read.]"
        )
    return "\n\n".join(blocks) + "\n"


async def extract_text(data: bytes, limit_seconds: float = TIMEOUT_SECONDS) -> PdfText:
    """The text of the PDF ``data``, page by page.

    Raises:
        PdfUnreadable: encrypted, malformed, or not read within ``limit_seconds``.
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "shared.attachments.pdf_worker",
        str(MAX_PAGES),
        str(MAX_CHARS),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(data), limit_seconds)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise PdfUnreadable("timeout") from None
    try:
        result = json.loads(out)
    except json.JSONDecodeError:
        raise PdfUnreadable("malformed") from None  # the child died (a limit, a crash)
    if "error" in result:
        raise PdfUnreadable(str(result["error"]))
    pages = [str(p) for p in result["pages"]]
    return PdfText(int(result["pageCount"]), with_markers(pages, int(result["pageCount"])))
