"""A PDF's text, extracted with pypdf in a child process (the only module that imports it).

    python -m shared.attachments.pdf_worker MAX_PAGES MAX_CHARS < file.pdf > result.json

The parent (``pdf.py``) kills it after its time limit; here the address space and CPU
time are capped too, so a hostile PDF can neither exhaust the server's memory nor spin.
Writes one JSON object: ``{"pageCount", "pages": [text…]}`` or ``{"error": kind}`` with
kind ``encrypted`` or ``malformed``.
"""

from __future__ import annotations

import io
import json
import logging
import resource
import sys
from typing import Any

MEMORY_BYTES = 1024 * 1024 * 1024
CPU_SECONDS = 30


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def extract(data: bytes, max_pages: int, max_chars: int) -> dict[str, Any]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    logging.disable(logging.WARNING)  # pypdf warns on stderr about every oddity
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            return {"error": "encrypted"}
        count = len(reader.pages)
        pages: list[str] = []
        total = 0
        for page in reader.pages[:max_pages]:
            text = page.extract_text() or ""
            text = text[: max(0, max_chars - total)]
            total += len(text)
            pages.append(text)
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, IndexError):
        return {"error": "malformed"}
    except NotImplementedError:
        return {"error": "encrypted"}  # an encryption scheme pypdf cannot open
    return {"pageCount": count, "pages": pages}


def main() -> None:
    _limit()
    max_pages, max_chars = int(sys.argv[1]), int(sys.argv[2])
    data = sys.stdin.buffer.read()
    json.dump(extract(data, max_pages, max_chars), sys.stdout)


if __name__ == "__main__":
    main()
