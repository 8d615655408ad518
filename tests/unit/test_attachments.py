"""Attachments: each rule with real files made here (DESIGN §9), through ``Agent.send``."""

from __future__ import annotations

import asyncio
import io
import os
import threading
import time

import pytest
from PIL import Image

from shared.attachment_rules import MAX_BYTES
from shared.attachments import service as attachments_service
from shared.attachments.images import Normalised, normalise
from shared.attachments.service import Requested
from shared.errors import (
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RequestError,
    RunInProgress,
    UnprocessableContent,
    UnsupportedMediaType,
)
from shared.llm.scripted import ScriptedProvider
from tests.samples import (
    encrypted_pdf,
    has_gps,
    jpeg_with_gps,
    pdf_with_pages,
    pixel_bomb_png,
    png_with_gps,
)
from tests.unit.helpers import ALICE, Harness, make_service

UPLOADS = "alice/uploads/"


@pytest.fixture
def harness() -> Harness:
    return make_service(ScriptedProvider([]))


async def upload(harness: Harness, name: str, data: bytes, content_type: str) -> Requested:
    path = UPLOADS + name
    await harness.fakes.files.write(path, data, content_type)
    return Requested(path, content_type, len(data))


async def send(harness: Harness, *attachments: Requested) -> list[dict[str, object]]:
    sent = await harness.agent.send(ALICE, "Please look", None, attachments=attachments)
    conversation = await harness.store.get(ALICE.uid, sent.conversation_id)
    assert conversation is not None
    (message,) = conversation.messages
    return [part.to_firestore() for part in message.content[1:]]


def nothing_written(harness: Harness, *uploaded: Requested) -> None:
    assert harness.store._documents == {}
    assert harness.fakes.files.paths() == sorted(r.storage_path for r in uploaded)


async def test_attachments_png_is_normalised_to_jpeg_without_gps_and_upright(
    harness: Harness,
) -> None:
    original = png_with_gps(width=120, height=80)
    assert has_gps(original)
    png = await upload(harness, "map homework.png", original, "image/png")
    (part,) = await send(harness, png)
    jpeg_path = UPLOADS + "map homework.png.normalised.jpg"
    jpeg = await harness.fakes.files.read(jpeg_path, MAX_BYTES)
    assert part == {
        "type": "image",
        "file": {
            "storagePath": jpeg_path,
            "contentType": "image/jpeg",
            "sizeBytes": len(jpeg),
            "name": "map homework.png",
            "originalPath": png.storage_path,
            "width": 80,
            "height": 120,
        },
        "description": "An image: “map homework.png”.",
    }
    with Image.open(io.BytesIO(jpeg)) as image:
        assert image.format == "JPEG"
        assert image.size == (80, 120)  # orientation 6 applied
        assert not image.getexif()  # no EXIF at all: no GPS, no camera model
        assert "icc_profile" not in image.info
        assert image.getpixel((40, 60))[0] > 150  # still red


async def test_attachments_jpeg_is_re_encoded_so_its_gps_goes(harness: Harness) -> None:
    original = jpeg_with_gps()
    assert has_gps(original)
    jpeg = await upload(harness, "photo.jpg", original, "image/jpeg")
    (part,) = await send(harness, jpeg)
    stored = await harness.fakes.files.read(UPLOADS + "photo.jpg.normalised.jpg", MAX_BYTES)
    assert not has_gps(stored)
    assert part["file"]["width"] == 64  # type: ignore[index]


async def test_attachments_large_image_is_scaled_to_2048_on_its_long_side(
    harness: Harness,
) -> None:
    out = io.BytesIO()
    Image.new("RGB", (4000, 1000), (0, 0, 0)).save(out, "PNG")
    big = await upload(harness, "wide.png", out.getvalue(), "image/png")
    (part,) = await send(harness, big)
    assert (part["file"]["width"], part["file"]["height"]) == (2048, 512)  # type: ignore[index]


async def test_attachments_pdf_gets_page_count_and_text_with_page_markers(
    harness: Harness,
) -> None:
    pdf = await upload(
        harness,
        "essay.pdf",
        pdf_with_pages("First page words", "Second page words"),
        "application/pdf",
    )
    (part,) = await send(harness, pdf)
    text_path = UPLOADS + "essay.pdf.text.txt"
    text = (await harness.fakes.files.read(text_path, MAX_BYTES)).decode()
    assert text.startswith("--- Page 1 ---\nFirst page words")
    assert "--- Page 2 ---\nSecond page words" in text
    assert part == {
        "type": "file",
        "file": {
            "storagePath": pdf.storage_path,
            "contentType": "application/pdf",
            "sizeBytes": pdf.size_bytes,
            "name": "essay.pdf",
            "pageCount": 2,
            "textPath": text_path,
            "textChars": len(text),
        },
        "description": "A PDF, “essay.pdf”, of 2 pages.",
    }


async def test_attachments_pdf_bytes_claiming_jpeg_are_refused(harness: Harness) -> None:
    fake = await upload(harness, "scan.jpg", pdf_with_pages("Hi"), "image/jpeg")
    with pytest.raises(UnsupportedMediaType) as caught:
        await send(harness, fake)
    assert caught.value.status == 415
    assert "'scan.jpg'" in caught.value.message
    assert "application/pdf" in caught.value.message
    nothing_written(harness, fake)


async def test_attachments_jpeg_claiming_pdf_is_refused(harness: Harness) -> None:
    fake = await upload(harness, "report.pdf", jpeg_with_gps(), "application/pdf")
    with pytest.raises(UnsupportedMediaType, match=r"'report\.pdf'.*image/jpeg"):
        await send(harness, fake)
    nothing_written(harness, fake)


async def test_attachments_other_types_are_refused_by_claim_and_by_bytes(
    harness: Harness,
) -> None:
    gif = await upload(harness, "anim.gif", b"GIF89a" + b"\0" * 20, "image/gif")
    with pytest.raises(UnsupportedMediaType, match=r"'anim\.gif'"):
        await send(harness, gif)
    lying = await upload(harness, "anim2.png", b"GIF89a" + b"\0" * 20, "image/png")
    with pytest.raises(UnsupportedMediaType, match=r"'anim2.png' is not a JPEG, PNG or PDF"):
        await send(harness, lying)
    nothing_written(harness, gif, lying)


async def test_attachments_over_25_mb_is_refused_before_any_download(harness: Harness) -> None:
    big = await upload(
        harness, "huge.pdf", b"%PDF-" + os.urandom(26 * 1024 * 1024), "application/pdf"
    )
    with pytest.raises(
        PayloadTooLarge, match=r"'huge\.pdf' is 27\.3 MB \(27,262,981 bytes\).*at most 25 MB"
    ) as caught:
        await send(harness, big)
    assert caught.value.status == 413
    assert harness.fakes.files.reads == []
    nothing_written(harness, big)


async def test_attachments_path_of_another_user_is_forbidden(harness: Harness) -> None:
    await harness.fakes.files.write("bob/uploads/diary.png", png_with_gps(), "image/png")
    theirs = Requested("bob/uploads/diary.png", "image/png", 10)
    with pytest.raises(Forbidden, match=r"'diary.png' cannot be used.*alice/uploads/"):
        await send(harness, theirs)
    assert harness.fakes.files.reads == []
    for sneaky in ("alice/uploads/../../bob/uploads/diary.png", "alice/uploads//x.png"):
        with pytest.raises(Forbidden):
            await send(harness, Requested(sneaky, "image/png", 10))
    assert harness.store._documents == {}


async def test_attachments_derived_files_cannot_be_referenced(harness: Harness) -> None:
    derived = await upload(harness, "a.png.normalised.jpg", jpeg_with_gps(), "image/jpeg")
    with pytest.raises(Forbidden, match=r"derives"):
        await send(harness, derived)


async def test_attachments_missing_file_is_not_found(harness: Harness) -> None:
    with pytest.raises(NotFound, match=r"'gone.png' was not found") as caught:
        await send(harness, Requested(UPLOADS + "gone.png", "image/png", 100))
    assert caught.value.status == 404
    assert harness.store._documents == {}


async def test_attachments_pixel_bomb_is_refused(harness: Harness) -> None:
    bomb = await upload(harness, "bomb.png", pixel_bomb_png(), "image/png")
    with pytest.raises(PayloadTooLarge, match=r"'bomb.png' has too many pixels"):
        await send(harness, bomb)
    nothing_written(harness, bomb)


async def test_attachments_encrypted_or_broken_pdf_is_a_clear_error(harness: Harness) -> None:
    locked = await upload(harness, "locked.pdf", encrypted_pdf(), "application/pdf")
    with pytest.raises(UnprocessableContent, match=r"'locked.pdf'.*encrypted") as caught:
        await send(harness, locked)
    assert caught.value.status == 422
    broken = await upload(harness, "broken.pdf", b"%PDF-1.4\n garbage", "application/pdf")
    with pytest.raises(UnprocessableContent, match=r"'broken.pdf'.*damaged"):
        await send(harness, broken)
    nothing_written(harness, locked, broken)


async def test_attachments_one_bad_file_means_nothing_is_written(harness: Harness) -> None:
    good = await upload(harness, "good.png", png_with_gps(), "image/png")
    bad = await upload(harness, "bad.pdf", encrypted_pdf(), "application/pdf")
    with pytest.raises(UnprocessableContent):
        await send(harness, good, bad)
    nothing_written(harness, good, bad)  # no normalised JPEG for the good one either


async def test_attachments_more_than_ten_are_refused(harness: Harness) -> None:
    one = await upload(harness, "one.png", png_with_gps(), "image/png")
    with pytest.raises(RequestError, match=r"at most 10 attachments") as caught:
        await send(harness, *([one] * 11))
    assert caught.value.status == 400


async def test_attachments_size_must_match_the_stored_file(harness: Harness) -> None:
    png = await upload(harness, "x.png", png_with_gps(), "image/png")
    with pytest.raises(RequestError, match=r"'x.png' is"):
        await send(harness, Requested(png.storage_path, "image/png", png.size_bytes + 1))


async def test_attachments_pdf_reading_past_its_time_limit_is_stopped() -> None:
    from shared.attachments.pdf import PdfUnreadable, extract_text

    pages = pdf_with_pages(*(["A long page of text. " * 200] * 50))
    with pytest.raises(PdfUnreadable) as caught:
        await extract_text(pages, limit_seconds=0.001)
    assert caught.value.kind == "timeout"
    read = await extract_text(pdf_with_pages("Still works"))
    assert "Still works" in read.text


# --- Refused before any work; decoded off the event loop, a few at a time (issue 18 #6) ---


def png_of(width: int, height: int, mode: str = "1") -> bytes:
    """A PNG of one colour: a few KB that decode to ``width`` × ``height`` pixels."""
    out = io.BytesIO()
    Image.new(mode, (width, height)).save(out, "PNG")
    return out.getvalue()


def just_under_the_pixel_limit() -> bytes:
    """39.6 MP in 5 KB: not a bomb by the header check, yet about 0.6 s of CPU and
    300 MB to decode (measured); any send may attach one."""
    return png_of(6000, 6600)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the images decoded (by the thread each was decoded in), decoding none."""
    seen: list[int] = []

    def spy(data: bytes) -> Normalised:
        seen.append(threading.get_ident())
        return Normalised(b"\xff\xd8\xff", 1, 1)

    monkeypatch.setattr(attachments_service, "normalise", spy)
    return seen


async def test_attachments_the_same_file_twice_is_refused_before_any_download(
    harness: Harness,
) -> None:
    one = await upload(harness, "one.png", png_with_gps(), "image/png")
    other = await upload(harness, "other.png", png_with_gps(), "image/png")
    with pytest.raises(RequestError, match=r"'one.png' is attached more than once") as caught:
        await send(harness, one, other, one)
    assert caught.value.status == 400
    assert harness.fakes.files.reads == []
    nothing_written(harness, one, other)


async def test_attachments_are_not_read_when_the_conversation_is_busy(
    harness: Harness, decodes: list[int]
) -> None:
    run = await harness.start(ALICE, "first")
    big = await upload(harness, "big.png", just_under_the_pixel_limit(), "image/png")
    with pytest.raises(RunInProgress) as caught:
        await harness.agent.send(ALICE, "and this", run.conversation_id, attachments=[big])
    assert caught.value.status == 409
    assert decodes == []
    assert harness.fakes.files.reads == []
    assert harness.fakes.files.paths() == [big.storage_path]
    stored = await harness.store.get(ALICE.uid, run.conversation_id)
    assert stored is not None and [m.text for m in stored.messages] == ["first"]


async def test_attachments_are_not_read_when_a_user_limit_refuses_the_send(
    decodes: list[int],
) -> None:
    harness = make_service(ScriptedProvider([]), runs_per_user=1)
    await harness.start(ALICE, "first")
    big = await upload(harness, "big.png", just_under_the_pixel_limit(), "image/png")
    with pytest.raises(RateLimited):
        await harness.agent.send(ALICE, "elsewhere", None, attachments=[big])
    assert decodes == []
    assert harness.fakes.files.reads == []
    assert harness.fakes.files.paths() == [big.storage_path]


async def test_attachments_are_not_read_when_the_queue_is_full(decodes: list[int]) -> None:
    harness = make_service(ScriptedProvider([]), queued_messages_per_conversation=1)
    run = await harness.start(ALICE, "first")
    await harness.agent.send(ALICE, "second", run.conversation_id, when_busy="queue")
    big = await upload(harness, "big.png", just_under_the_pixel_limit(), "image/png")
    with pytest.raises(RateLimited):
        await harness.agent.send(
            ALICE, "third", run.conversation_id, when_busy="queue", attachments=[big]
        )
    assert decodes == []
    assert harness.fakes.files.reads == []


async def test_attachments_a_bad_file_found_after_admission_frees_the_run_slot() -> None:
    harness = make_service(ScriptedProvider([]), runs_per_user=1)
    broken = await upload(harness, "broken.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "image/png")
    with pytest.raises(UnprocessableContent):
        await harness.agent.send(ALICE, "look", None, attachments=[broken])
    nothing_written(harness, broken)
    await harness.start(ALICE, "the slot is free again")


async def test_attachments_image_is_decoded_off_the_event_loop(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    threads: list[int] = []
    decoding = asyncio.Event()
    loop_turned = threading.Event()

    def held(data: bytes) -> Normalised:
        # The decode waits, mid-way, for the event loop to turn once: it can only turn
        # if the decode is not holding it (on the loop, this waits out its safety net).
        threads.append(threading.get_ident())
        loop.call_soon_threadsafe(decoding.set)
        assert loop_turned.wait(timeout=30), "the event loop did not turn during the decode"
        return normalise(data)

    async def turn() -> None:
        await decoding.wait()
        loop_turned.set()

    monkeypatch.setattr(attachments_service, "normalise", held)
    big = await upload(harness, "big.png", png_of(4000, 4000, "L"), "image/png")
    turned = asyncio.create_task(turn())
    await send(harness, big)
    await turned
    assert threads and threading.get_ident() not in threads


async def test_attachments_decodes_at_once_are_limited_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = make_service(ScriptedProvider([]), attachment_decodes_at_once=2, runs_per_user=4)
    lock = threading.Condition()
    now: list[int] = [0]
    peak: list[int] = [0]

    def slow(data: bytes) -> Normalised:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
            lock.notify_all()
            # Held until a second decode has started (the limit is met, however slowly
            # the sends arrive), then a little longer for a third to try.
            assert lock.wait_for(lambda: peak[0] >= 2, timeout=30), "no second decode"
        time.sleep(0.1)
        with lock:
            now[0] -= 1
        return Normalised(b"\xff\xd8\xff", 1, 1)

    monkeypatch.setattr(attachments_service, "normalise", slow)
    pictures = [await upload(harness, f"p{n}.png", png_with_gps(), "image/png") for n in range(4)]
    await asyncio.gather(
        *(harness.agent.send(ALICE, "look", None, attachments=[p]) for p in pictures)
    )
    assert peak[0] == 2
