"""``review_work``: structured feedback on an uploaded piece of work (seed 003)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.attachments.service import Attachments, Requested
from shared.errors import ToolError
from shared.llm.base import Finish, TextDelta
from shared.llm.scripted import ScriptedProvider, Step
from shared.prompts import load_prompt
from shared.schemas.documents import Lesson
from shared.store.files import InMemoryFileStore
from shared.store.memory import InMemoryLessonStore
from shared.tools.base import Ask, ToolContext, ToolOutput
from shared.tools.review import ReviewArgs, review_work_tool
from tests.samples import pdf_with_pages, png_with_gps
from tests.unit.helpers import egress_of

UPLOADS = "alice/uploads/"
CONTEXT = ToolContext("alice", "conv1", "call_1")
FEEDBACK = {
    "summary": "A clear account of photosynthesis.",
    "strengths": ["You name the inputs: light, water and carbon dioxide."],
    "corrections": [
        {
            "where": "page 2",
            "issue": "Roots do not make food.",
            "suggestion": "Roots take in water.",
        }
    ],
    "nextSteps": ["Draw the leaf and label where each input enters."],
    "mark": None,
    "question": None,
}


def replying(*replies: str) -> ScriptedProvider:
    return ScriptedProvider([Step([TextDelta(r), Finish("stop")]) for r in replies])


class Setup:
    def __init__(self, provider: ScriptedProvider) -> None:
        self.files = InMemoryFileStore()
        self.lessons = InMemoryLessonStore()
        self.provider = provider
        self.tool = review_work_tool(
            self.files, self.lessons, egress_of(provider), load_prompt("review")
        )
        self.asked: Ask | None = None

    async def attach(self, name: str, data: bytes, content_type: str) -> str:
        await self.files.write(UPLOADS + name, data, content_type)
        (part,) = await Attachments(self.files).prepare(
            "alice", [Requested(UPLOADS + name, content_type, len(data))]
        )
        assert part.file is not None
        return part.file.storage_path

    async def review(self, context: ToolContext = CONTEXT, **args: Any) -> dict[str, Any]:
        result = await self.tool.run(ReviewArgs.model_validate(args), context)
        if isinstance(result, ToolOutput):
            self.asked = result.ask
            result = result.value
        assert isinstance(result, dict)
        return result


async def test_review_work_a_pdf_gets_structured_feedback_and_no_mark_unasked() -> None:
    setup = Setup(replying(json.dumps({**FEEDBACK, "mark": {"score": 3, "outOf": 5}})))
    path = await setup.attach(
        "essay.pdf", pdf_with_pages("Plants use light", "Roots"), "application/pdf"
    )
    result = await setup.review(file=path, brief="Explain photosynthesis in 200 words.")
    assert result["status"] == "reviewed"
    expected = {k: v for k, v in FEEDBACK.items() if k != "question"}
    assert result["feedback"] == expected  # the model's mark dropped: none was asked for
    (request,) = setup.provider.requests
    (turn,) = request.messages
    assert turn.text.startswith("Review this piece of work.")
    assert "Brief:\nExplain photosynthesis in 200 words." in turn.text
    assert "--- Page 1 ---\nPlants use light" in turn.text and "--- Page 2 ---\nRoots" in turn.text
    assert "Reply with JSON only" in request.system


async def test_review_work_an_image_goes_to_the_model_as_the_clean_jpeg() -> None:
    setup = Setup(replying(json.dumps(FEEDBACK)))
    path = await setup.attach("worksheet.png", png_with_gps(), "image/png")
    assert path.endswith(".normalised.jpg")
    await setup.review(file=UPLOADS + "worksheet.png", brief="Times tables to 12.")
    (turn,) = setup.provider.requests[0].messages
    (image,) = turn.images
    assert base64.b64decode(image.data) == await setup.files.read(path, 10**7)
    assert setup.tool.display(ReviewArgs(file=path)) == "Reviewing worksheet.png"


async def test_review_work_gives_a_mark_out_of_what_was_asked_after_one_repair() -> None:
    wrong = {**FEEDBACK, "mark": {"score": 4, "outOf": 5, "reason": "Good."}}
    right = {**FEEDBACK, "mark": {"score": 8, "outOf": 10, "reason": "Accurate, one slip."}}
    setup = Setup(replying(json.dumps(wrong), "```json\n" + json.dumps(right) + "\n```"))
    path = await setup.attach("essay.pdf", pdf_with_pages("Light"), "application/pdf")
    result = await setup.review(file=path, brief="Explain.", markOutOf=10)
    assert result["feedback"]["mark"] == right["mark"]
    repair = setup.provider.requests[1].messages[-1].text
    assert repair == "That cannot be used: the mark must be out of 10. Reply with the JSON only."


async def test_review_work_reports_a_reply_that_is_never_feedback() -> None:
    setup = Setup(replying("Lovely work!", '{"summary": "Fine"}'))
    path = await setup.attach("essay.pdf", pdf_with_pages("Light"), "application/pdf")
    with pytest.raises(ToolError, match="no strengths, corrections or next steps"):
        await setup.review(file=path, brief="Explain.")


async def test_review_work_hands_an_ambiguous_piece_back_as_a_question() -> None:
    question = {"question": "Which task does this answer?", "options": ["Task 1", "Task 2"]}
    setup = Setup(replying(json.dumps({"question": question})))
    path = await setup.attach("scan.png", png_with_gps(), "image/png")
    result = await setup.review(file=path, brief="The homework sheet.")
    assert result["status"] == "needs_answer"
    assert result["question"] == question
    assert "ask_user_question" in result["note"]
    assert "feedback" not in result
    # The task puts it to the user in its own section (``TaskHandler``) ...
    assert setup.asked == Ask(
        "About the work", "Which task does this answer?", ("Task 1", "Task 2")
    )


async def test_review_work_reviews_again_with_the_answer_and_never_asks_twice() -> None:
    question = {"question": "Which task does this answer?", "options": ["Task 1", "Task 2"]}
    setup = Setup(replying(json.dumps({"question": question})))
    path = await setup.attach("scan.png", png_with_gps(), "image/png")
    answer = "Asked “Which task does this answer?”, they answered: Task 2."
    context = ToolContext("alice", "conv1", "call_1", answer=answer)
    result = await setup.review(context, file=path, brief="The homework sheet.")
    assert answer in setup.provider.requests[0].messages[0].text
    # Still ambiguous: the model takes it from here, as before.
    assert result["status"] == "needs_answer" and setup.asked is None


async def test_review_work_reviews_against_the_open_lesson() -> None:
    setup = Setup(replying(json.dumps(FEEDBACK)))
    now = datetime(2026, 11, 22, tzinfo=UTC)
    body = "<lesson><h1>Fractions</h1><p>Halves and quarters.</p></lesson>"
    await setup.lessons.create(
        "alice",
        Lesson(id="l1", title="Fractions", body=body, version=1, created_at=now, updated_at=now),
    )
    path = await setup.attach("answers.pdf", pdf_with_pages("1/2"), "application/pdf")
    context = ToolContext("alice", "conv1", "call_1", document_id="l1")
    await setup.review(context, file=path)
    assert body in setup.provider.requests[0].messages[0].text


async def test_review_work_a_pdf_with_no_text_asks_for_photos_instead() -> None:
    setup = Setup(replying())
    path = await setup.attach("scan.pdf", pdf_with_pages("", ""), "application/pdf")
    with pytest.raises(ToolError, match="no text that could be read"):
        await setup.review(file=path, brief="Spelling test.")
    assert setup.provider.requests == []


@pytest.mark.parametrize(
    ("file", "args", "message"),
    [
        ("bob/uploads/essay.pdf", {"brief": "x"}, "not one of this user's attachments"),
        (UPLOADS + "../bob/uploads/essay.pdf", {"brief": "x"}, "not one of this user's"),
        (UPLOADS + "never.pdf", {"brief": "x"}, "not an attachment of this conversation"),
        (UPLOADS + "essay.pdf", {}, "give a brief"),
        (UPLOADS + "essay.pdf", {"lessonId": "nope"}, "no lesson 'nope'"),
    ],
)
async def test_review_work_refuses_what_it_cannot_review(
    file: str, args: dict[str, Any], message: str
) -> None:
    setup = Setup(replying())
    await setup.attach("essay.pdf", pdf_with_pages("Light"), "application/pdf")
    await setup.files.write("bob/uploads/essay.pdf.text.txt", b"Bob's", "text/plain")
    with pytest.raises(ToolError, match=message):
        await setup.review(file=file, **args)
    assert setup.provider.requests == []  # the model was never asked
