"""What preparing attachments costs, measured side by side in one run.

    .venv/bin/python bench/attachments.py [--repeat 5]

* PDF text: pypdf in this process against our limited child process
  (``shared.attachments.pdf.extract_text``: a fresh interpreter with memory and CPU
  limits, killed after 20 s), for a 2-page and a 50-page PDF. The ratio is what the
  isolation costs.
* Images: ``normalise`` (decode, turn upright, scale to 2048 px, re-encode without
  metadata) of a phone-sized photo, as PNG and as JPEG.
* What the model is shown: base64 of each image, every model call, against the
  history's text alone (``choose`` and ``describe`` on a 20-message window).

Median wall-clock milliseconds of ``--repeat`` runs; files are made here.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from PIL import Image  # noqa: E402

from shared.agent.prompt.files import AttachmentBudget, choose  # noqa: E402
from shared.agent.prompt.history import build_history  # noqa: E402
from shared.attachments.images import normalise  # noqa: E402
from shared.attachments.pdf import MAX_PAGES, PdfText, extract_text, with_markers  # noqa: E402
from shared.attachments.pdf_worker import extract  # noqa: E402
from shared.schemas.documents import ContentPart, FileRef, Message  # noqa: E402
from tests.samples import pdf_with_pages  # noqa: E402

MAX_CHARS = 200_000


def timed(work: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs)


def photo(fmt: str) -> bytes:
    """A 4000×3000 photo-like picture (a gradient with noise), as ``fmt``."""
    gradient = Image.linear_gradient("L").resize((4000, 3000))
    noise = Image.effect_noise((4000, 3000), 40)
    image = Image.merge("RGB", (gradient, noise, gradient.rotate(180)))
    out = io.BytesIO()
    image.save(out, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return out.getvalue()


def history(images: int) -> list[Message]:
    now = datetime(2026, 11, 22, tzinfo=UTC)
    messages = []
    for n in range(20):
        parts = [ContentPart.of_text(f"Message {n}: " + "words " * 40)]
        if n % (20 // max(images, 1)) == 0 and images:
            ref = FileRef(
                storage_path=f"u/uploads/p{n}.png.normalised.jpg",
                content_type="image/jpeg",
                size_bytes=400_000,
                name=f"p{n}.png",
                width=2048,
                height=1536,
            )
            parts.append(ContentPart(type="image", file=ref))
        role = "user" if n % 2 == 0 else "assistant"
        messages.append(
            Message(id=f"m{n}", role=role, created_at=now, status="complete", content=parts)
        )
    return messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat

    print("PDF text, ms (median)            in-process   child process   ratio")
    for pages in (2, 50):
        data = pdf_with_pages(*(f"Page {n} of the essay. " * 60 for n in range(pages)))

        def inline(data: bytes = data) -> str:
            got = extract(data, MAX_PAGES, MAX_CHARS)
            return with_markers(got["pages"], got["pageCount"])

        def isolated(data: bytes = data) -> PdfText:
            return asyncio.run(extract_text(data))

        assert inline() == isolated().text
        ours, theirs = timed(isolated, repeat), timed(inline, repeat)
        ratio = ours / theirs
        print(f"  {pages:>2} pages{theirs:30.1f}{ours:16.1f}{ratio:8.1f}×")

    print("\nImage normalisation, ms (median)  input      output")
    for fmt in ("PNG", "JPEG"):
        data = photo(fmt)
        clean = normalise(data)
        ms = timed(lambda data=data: normalise(data), repeat)
        print(
            f"  4000×3000 {fmt:<4} {ms:10.1f}      {len(data) / 1e6:5.1f} MB   "
            f"{len(clean.data) / 1e6:5.2f} MB ({clean.width}×{clean.height})"
        )

    print("\nOne model call's history (20 messages), µs (median)")
    budget = AttachmentBudget(images=4, image_bytes=10 * 1024 * 1024, text_chars=60_000)
    for images in (0, 4):
        messages = history(images)
        wanted = choose(messages, budget)
        shown = {w.ref.storage_path: None for w in wanted}

        def view(messages: list[Message] = messages, shown: dict[str, None] = shown) -> None:
            build_history(messages, 20, 200_000, shown=shown)
            choose(messages, budget)

        us = timed(view, repeat * 200) * 1000
        print(f"  {images} image(s) in the window        {us:8.1f}")


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("attachments"):
        main()
