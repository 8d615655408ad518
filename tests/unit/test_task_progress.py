"""Every task tool reports its progress steps into its section (issue 37): a lesson is
drafted, checked and saved; a piece of work is read, reviewed and its feedback checked
(plan_lessons' steps are in test_lesson_tools.py)."""

from __future__ import annotations

import json

from shared.agent.waiting.questions import question_call_id
from shared.attachments.service import Attachments, Requested
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import TaskDocument
from shared.tools.base import ToolContext, ToolRegistry
from tests.samples import pdf_with_pages
from tests.unit.helpers import ALICE, Fakes, make_service, run_to_end
from tests.unit.test_lesson_tools import DRAFT, call
from tests.unit.test_review_work import FEEDBACK
from tests.unit.test_tasks import SlowArgs, calls, deliver_all, task_tool

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


async def test_review_work_resumed_after_its_question_goes_on_counting_its_steps() -> None:
    """The review asks which task the work answers and waits; once answered it runs
    again (its next attempt): its steps follow the first ones, numbered on from them,
    and the section keeps them all."""
    fakes = Fakes()
    pdf = pdf_with_pages("Task 1: leaves", "Task 2: roots")
    await fakes.files.write("alice/uploads/sheet.pdf", pdf, "application/pdf")
    requested = Requested("alice/uploads/sheet.pdf", "application/pdf", len(pdf))
    (part,) = await Attachments(fakes.files).prepare("alice", [requested])
    assert part.file is not None
    args = {"file": part.file.storage_path, "brief": "The sheet."}
    question = {"question": "Which task does this answer?", "options": ["Task 1", "Task 2"]}
    provider = ScriptedProvider(
        [
            call("review_work", args, "c1"),
            Step.reply(json.dumps({"question": question})),
            Step.reply(json.dumps(FEEDBACK)),
            Step.reply("Here is the feedback."),
        ]
    )
    service = make_service(provider, fakes=fakes)
    sent = await service.agent.send(ALICE, "review my sheet", None)
    assert sent.run is not None
    await sent.run.execute()
    await deliver_all(service, fakes.queue)
    (waiting,) = await fakes.sections.recent("alice")
    assert waiting.status == "waiting_on_user"
    assert [u.step for u in waiting.updates] == [1, 2, 3]

    record = next(iter((await fakes.ledger.get("alice")).tasks.values()))
    ask = question_call_id(record.tool_call_id)
    answered = await service.agent.answer(
        "alice", sent.conversation_id, ask, {"0": "Task 2"}, background=True
    )
    assert answered.status == "accepted"
    await deliver_all(service, fakes.queue)
    (section,) = await fakes.sections.recent("alice")
    assert section.status == "completed"
    read = ["Reading the work", "Reviewing the work", "Checking the feedback"]
    assert [u.text for u in section.updates] == read + read
    assert [u.step for u in section.updates] == [1, 2, 3, 4, 5, 6]
    assert [u.attempt for u in section.updates] == [1, 1, 1, 2, 2, 2]
    assert [u.seq for u in section.updates] == [1, 2, 3, 4, 5, 6]


async def test_a_retried_attempt_goes_on_counting_its_steps_after_the_failed_one() -> None:
    """An attempt that failed after a step is retried: its steps follow, numbered on."""

    class Failing:
        def __init__(self) -> None:
            self.runs = 0

        async def __call__(self, args: SlowArgs, context: ToolContext) -> dict[str, str]:
            self.runs += 1
            await context.progress(f"Reading {args.topic}")
            if self.runs == 1:
                raise RuntimeError("the lesson service timed out")
            await context.progress("Writing")
            return {"lesson": "A lesson"}

    provider = ScriptedProvider([calls(("make_lesson", "call_1")), Step.reply("Ready.")])
    fakes = Fakes()
    tools = ToolRegistry([task_tool(Failing())])
    service = make_service(provider, fakes=fakes, tools=tools, task_retry_base_ms=10)
    await run_to_end(service, ALICE, "lesson")
    await deliver_all(service, fakes.queue)
    (section,) = await fakes.sections.recent("alice")
    assert section.status == "completed"
    assert [(u.text, u.attempt, u.step) for u in section.updates] == [
        ("Reading tides", 1, 1),
        ("Reading tides", 2, 2),
        ("Writing", 2, 3),
    ]
