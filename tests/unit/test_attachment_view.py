"""What the model is shown of attachments: images as image parts, PDFs as text with page
markers, newest first within a budget, older ones as references (DESIGN §9)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from shared.agent.prompt.files import AttachmentBudget, PdfExcerpt, choose
from shared.agent.prompt.history import build_history
from shared.attachments.service import Requested
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import ContentPart, FileRef, Message
from shared.store.files import InMemoryFileStore
from tests.samples import pdf_with_pages, png_with_gps
from tests.unit.helpers import ALICE, Fakes, make_service

UPLOADS = "alice/uploads/"
NOW = datetime(2026, 11, 22, tzinfo=UTC)


def image_ref(name: str, size: int = 1000) -> FileRef:
    return FileRef(
        storage_path=f"{UPLOADS}{name}.normalised.jpg",
        content_type="image/jpeg",
        size_bytes=size,
        name=name,
        width=40,
        height=30,
    )


def pdf_ref(name: str, chars: int) -> FileRef:
    return FileRef(
        storage_path=f"{UPLOADS}{name}",
        content_type="application/pdf",
        size_bytes=5000,
        name=name,
        page_count=2,
        text_path=f"{UPLOADS}{name}.text.txt",
        text_chars=chars,
    )


def user_message(n: int, *refs: FileRef, text: str = "") -> Message:
    parts = [ContentPart.of_text(text)] if text else []
    parts += [
        ContentPart(type="file" if r.content_type == "application/pdf" else "image", file=r)
        for r in refs
    ]
    return Message(id=f"m{n}", role="user", created_at=NOW, status="complete", content=parts)


def test_choose_takes_the_newest_images_within_count_and_bytes() -> None:
    old, mid, new = image_ref("old.png"), image_ref("mid.png", 3000), image_ref("new.png")
    messages = [user_message(1, old), user_message(2, mid, new)]
    chosen = choose(messages, AttachmentBudget(images=2, image_bytes=10_000, text_chars=0))
    assert [w.ref.name for w in chosen] == ["new.png", "mid.png"]
    chosen = choose(messages, AttachmentBudget(images=5, image_bytes=2500, text_chars=0))
    assert [w.ref.name for w in chosen] == ["new.png", "old.png"]  # mid does not fit


def test_choose_cuts_the_pdf_that_crosses_the_text_budget_and_skips_the_rest() -> None:
    messages = [
        user_message(1, pdf_ref("a.pdf", 5000)),
        user_message(2, pdf_ref("b.pdf", 8000)),
        user_message(3, pdf_ref("c.pdf", 3000)),
    ]
    chosen = choose(messages, AttachmentBudget(images=0, image_bytes=0, text_chars=10_000))
    assert [(w.ref.name, w.chars) for w in chosen] == [("c.pdf", 3000), ("b.pdf", 7000)]


async def test_an_image_reaches_the_model_as_an_image_part_and_a_pdf_as_text_with_pages() -> None:
    provider = ScriptedProvider([Step.reply("Thanks!")])
    harness = make_service(provider)
    files = harness.fakes.files
    png, pdf = png_with_gps(width=60, height=40), pdf_with_pages("Photosynthesis", "Roots")
    await files.write(UPLOADS + "leaf.png", png, "image/png")
    await files.write(UPLOADS + "essay.pdf", pdf, "application/pdf")
    sent = await harness.agent.send(
        ALICE,
        "What do you think?",
        None,
        attachments=[
            Requested(UPLOADS + "leaf.png", "image/png", len(png)),
            Requested(UPLOADS + "essay.pdf", "application/pdf", len(pdf)),
        ],
    )
    assert sent.run is not None
    await sent.run.execute()
    (request,) = provider.requests
    turn = request.messages[-1]
    assert turn.role == "user"
    assert turn.text.startswith('What do you think?\n\n[Image attached: "leaf.png"')
    assert "--- Page 1 ---\nPhotosynthesis" in turn.text
    assert "--- Page 2 ---\nRoots" in turn.text
    assert '[End of "essay.pdf".]' in turn.text
    (image,) = turn.images
    jpeg = await files.read(UPLOADS + "leaf.png.normalised.jpg", 10**6)
    assert image.media_type == "image/jpeg"
    assert base64.b64decode(image.data) == jpeg  # the normalised copy, never the upload


async def test_later_turns_keep_older_attachments_as_references() -> None:
    provider = ScriptedProvider([Step.reply("One"), Step.reply("Two")])
    harness = make_service(provider, attachment_images=1)
    files = harness.fakes.files
    first, second = png_with_gps(width=30, height=20), png_with_gps(width=20, height=30)
    await files.write(UPLOADS + "first.png", first, "image/png")
    await files.write(UPLOADS + "second.png", second, "image/png")
    sent = await harness.agent.send(
        ALICE, "Look", None, attachments=[Requested(UPLOADS + "first.png", "image/png", len(first))]
    )
    assert sent.run is not None
    await sent.run.execute()
    again = await harness.agent.send(
        ALICE,
        "And this one",
        sent.conversation_id,
        attachments=[Requested(UPLOADS + "second.png", "image/png", len(second))],
    )
    assert again.run is not None
    await again.run.execute()
    history = provider.requests[1].messages
    older, newer = history[0], history[-1]
    assert older.images == ()  # the budget is one image: the newest
    assert f'file "{UPLOADS}first.png.normalised.jpg"; not shown again' in older.text
    assert len(newer.images) == 1 and "second.png" in newer.text


async def test_a_missing_file_is_named_and_the_run_goes_on() -> None:
    ref = image_ref("gone.png")
    shown = {ref.storage_path: None}
    (turn,) = build_history([user_message(1, ref, text="Here")], 10, shown=shown)
    assert turn.text == (
        f'Here\n\n[Attachment "gone.png", file "{ref.storage_path}": it could not be loaded '
        "just now.]"
    )
    assert turn.images == ()
    provider = ScriptedProvider([Step.reply("Sorry, I cannot see it.")])
    harness = make_service(provider, fakes=Fakes(files=InMemoryFileStore()))
    png = png_with_gps(width=10, height=10)
    await harness.fakes.files.write(UPLOADS + "gone.png", png, "image/png")
    sent = await harness.agent.send(
        ALICE, "Look", None, attachments=[Requested(UPLOADS + "gone.png", "image/png", len(png))]
    )
    assert sent.run is not None
    harness.fakes.files._files.clear()  # deleted (the bucket's lifecycle) before the reply
    await sent.run.execute()
    (request,) = provider.requests
    assert "it could not be loaded just now" in request.messages[-1].text
    conversation = await harness.store.get(ALICE.uid, sent.conversation_id)
    assert conversation is not None and conversation.messages[-1].status == "complete"


def test_a_pdf_past_the_budget_is_cut_with_a_note() -> None:
    ref = pdf_ref("long.pdf", 5000)
    shown = {ref.storage_path: PdfExcerpt("--- Page 1 ---\n" + "x" * 985, 5000)}
    (turn,) = build_history([user_message(1, ref)], 10, shown=shown)
    assert turn.text.endswith('[The rest of "long.pdf" (4000 more characters) is left out here.]')


async def test_a_pdf_with_no_text_is_named_as_such_not_shown_as_empty_pages() -> None:
    provider = ScriptedProvider([Step.reply("I cannot read scans.")])
    harness = make_service(provider)
    scan = pdf_with_pages("", "")
    await harness.fakes.files.write(UPLOADS + "scan.pdf", scan, "application/pdf")
    sent = await harness.agent.send(
        ALICE,
        "Mark this",
        None,
        attachments=[Requested(UPLOADS + "scan.pdf", "application/pdf", len(scan))],
    )
    assert sent.run is not None
    await sent.run.execute()
    (request,) = provider.requests
    assert request.messages[-1].text == (
        f'Mark this\n\n[PDF attached: "scan.pdf", 2 pages, file "{UPLOADS}scan.pdf"; it has '
        "no text that could be extracted (it may be scanned pages).]"
    )
