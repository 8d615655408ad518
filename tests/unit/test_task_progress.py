"""Every task tool reports its progress steps into its section (issue 37): a lesson is
drafted, checked and saved; a piece of work is read, reviewed and its feedback checked
(plan_lessons' steps are in test_lesson_tools.py)."""

from __future__ import annotations

import json

from shared.attachments.service import Attachments, Requested
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import TaskDocument
from tests.samples import pdf_with_pages
from tests.unit.helpers import ALICE, Fakes, make_service
from tests.unit.test_lesson_tools import DRAFT, call
from tests.unit.test_review_work import FEEDBACK
from tests.unit.test_tasks import deliver_all

BRIEF = {"topic": "tides", "audience": "Year 5"}


async def section_of(provider: ScriptedProvider, text: str, fakes: Fakes) -> TaskDocument:
    """The one task's section once the conversation that ``text`` starts has run."""
    service = make_service(provider, fakes=fakes)
    sent = await service.agent.send(ALICE, text, None)
    assert sent.run is not None
    await sent.run.execute()
    await deliver_all(service, fakes.queue)
    (section,) = await fakes.sections.recent("alice")
    assert section.status == "completed"
    return section


async def test_create_lesson_shows_drafting_checking_and_saving() -> None:
    provider = ScriptedProvider(
        [call("create_lesson", BRIEF, "c1"), Step.reply(DRAFT), Step.reply("Ready.")]
    )
    section = await section_of(provider, "a lesson on tides", Fakes())
    steps = [update.text for update in section.updates]
    assert steps == ["Drafting the lesson", "Checking the draft", "Saving the lesson"]


async def test_create_lesson_shows_a_draft_corrected() -> None:
    provider = ScriptedProvider(
        [
            call("create_lesson", BRIEF, "c1"),
            Step.reply("<lesson><p>no title</lesson>"),
            Step.reply(DRAFT),
            Step.reply("Ready."),
        ]
    )
    section = await section_of(provider, "a lesson on tides", Fakes())
    assert [update.text for update in section.updates] == [
        "Drafting the lesson",
        "Checking the draft",
        "Correcting the draft",
        "Checking the draft",
        "Saving the lesson",
    ]


async def test_review_work_shows_reading_reviewing_and_checking() -> None:
    fakes = Fakes()
    pdf = pdf_with_pages("Plants use light", "Roots")
    await fakes.files.write("alice/uploads/essay.pdf", pdf, "application/pdf")
    requested = Requested("alice/uploads/essay.pdf", "application/pdf", len(pdf))
    (part,) = await Attachments(fakes.files).prepare("alice", [requested])
    assert part.file is not None
    args = {"file": part.file.storage_path, "brief": "Explain photosynthesis."}
    provider = ScriptedProvider(
        [
            call("review_work", args, "c1"),
            Step.reply(json.dumps(FEEDBACK)),
            Step.reply("Here is the feedback."),
        ]
    )
    section = await section_of(provider, "review my essay", fakes)
    steps = [update.text for update in section.updates]
    assert steps == ["Reading the work", "Reviewing the work", "Checking the feedback"]
