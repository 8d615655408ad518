"""``review_work``: structured feedback on a piece of work the user uploaded (seed 003).

A task tool. It reads one of the user's attachments (the normalised JPEG of an image,
or a PDF's extracted text with its page markers), the brief or the lesson the work
answers, and asks the model (``prompts/review.md``) for JSON feedback: strengths,
corrections, next steps, and a mark only when one was asked for. A reply that is not
that JSON goes back to the model once with the reason. When the work is ambiguous the
model asks a question instead; the task puts it to the user as an ``ask_user_question``
of its own (its section waits on the user) and, once answered, reviews again with the
answer in the same section. A question that cannot be put that way (fewer than two
answers to offer), or a second one, goes to the agent as before, which asks it and calls
the tool again.

The tool changes nothing: a retried task only asks the model again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shared.attachment_rules import (
    MAX_BYTES,
    NORMALISED_SUFFIX,
    TEXT_SUFFIX,
    file_name,
    path_problem,
)
from shared.attachments.pdf import has_text
from shared.egress.gate import Egress
from shared.errors import NotFound, ToolError
from shared.llm.base import (
    ChatMessage,
    ImagePart,
    ModelRequest,
    json_in,
)
from shared.store.base import LessonStore
from shared.store.files import FileStore
from shared.tools.base import Ask, Tool, ToolContext, ToolOutput
from shared.tools.people import QUESTION_TOOL

# The most of a PDF's text, and of a lesson, the reviewing model is given.
WORK_CHARS = 60_000
LESSON_CHARS = 30_000
ASK = "Review this piece of work."


class ReviewArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str = Field(
        min_length=1,
        max_length=1100,
        description='The attachment to review: the file its note names ("<uid>/uploads/…").',
    )
    brief: str = Field(
        default="",
        max_length=4000,
        description="What the work was meant to do: the task, its criteria or mark scheme.",
    )
    lessonId: str | None = Field(  # noqa: N815 (the API's own spelling)
        default=None,
        max_length=200,
        description="The lesson the work answers; the lesson open here when omitted.",
    )
    learner: str = Field(
        default="", max_length=200, description="Who did the work: age, year group or level."
    )
    markOutOf: int | None = Field(  # noqa: N815
        default=None,
        ge=1,
        le=1000,
        description="Give a mark out of this many; only when the user asked for a mark.",
    )


class Correction(BaseModel):
    model_config = ConfigDict(extra="ignore")

    where: str = Field(default="", max_length=500)
    issue: str = Field(min_length=1, max_length=1000)
    suggestion: str = Field(default="", max_length=2000)


class Mark(BaseModel):
    model_config = ConfigDict(extra="ignore")

    score: int = Field(ge=0)
    outOf: int = Field(ge=1)  # noqa: N815
    reason: str = Field(default="", max_length=1000)

    @model_validator(mode="after")
    def _within(self) -> Mark:
        if self.score > self.outOf:
            raise ValueError("the score is more than the mark is out of")
        return self


class Question(BaseModel):
    model_config = ConfigDict(extra="ignore")

    question: str = Field(min_length=1, max_length=500)
    options: list[str] = Field(default_factory=list, max_length=6)


class Feedback(BaseModel):
    """What the reviewing model must reply (``prompts/review.md``)."""

    model_config = ConfigDict(extra="ignore")

    summary: str = Field(default="", max_length=2000)
    strengths: list[str] = Field(default_factory=list, max_length=8)
    corrections: list[Correction] = Field(default_factory=list, max_length=10)
    nextSteps: list[str] = Field(default_factory=list, max_length=5)  # noqa: N815
    mark: Mark | None = None
    question: Question | None = None


def parse_feedback(reply: str, mark_out_of: int | None) -> Feedback:
    """The feedback in the reviewing model's reply.

    Raises:
        ValueError: why it cannot be used (said back to the model).
    """
    try:
        feedback = Feedback.model_validate(json_in(reply))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{where}: {first['msg']}") from None
    if feedback.question is not None:
        return feedback
    if not feedback.strengths and not feedback.corrections and not feedback.nextSteps:
        raise ValueError("it has no strengths, corrections or next steps")
    if mark_out_of is None:
        return feedback.model_copy(update={"mark": None})  # a mark only when asked for
    if feedback.mark is None or feedback.mark.outOf != mark_out_of:
        raise ValueError(f"the mark must be out of {mark_out_of}")
    return feedback


@dataclass(frozen=True, slots=True)
class Work:
    """The work as the reviewing model is given it: an image, or a PDF's text."""

    name: str
    image: ImagePart | None = None
    text: str = ""


async def _work(files: FileStore, user_id: str, path: str) -> Work:
    """The file ``path`` names: an image's normalised JPEG, or a PDF's text.

    Raises:
        ToolError: not one of the user's attachments, or gone.
    """
    original = path.removesuffix(NORMALISED_SUFFIX).removesuffix(TEXT_SUFFIX)
    if path_problem(user_id, original) is not None:
        raise ToolError("That file is not one of this user's attachments.")
    name = file_name(original)
    for candidate in (original + NORMALISED_SUFFIX, original + TEXT_SUFFIX):
        try:
            data = await files.read(candidate, MAX_BYTES)
        except NotFound:
            continue
        if candidate.endswith(NORMALISED_SUFFIX):
            return Work(name=name, image=ImagePart.of("image/jpeg", data))
        text = data.decode("utf-8", errors="replace")
        if not has_text(text):
            raise ToolError(
                f"{name!r} has no text that could be read (it may be scanned pages); ask "
                "the user for photos of the pages instead."
            )
        if len(text) > WORK_CHARS:
            text = text[:WORK_CHARS] + f"\n[The rest ({len(text) - WORK_CHARS} characters) is cut.]"
        return Work(name=name, text=text)
    raise ToolError(
        f"{name!r} is not an attachment of this conversation that can be reviewed (or it "
        "was deleted); ask the user to attach it again."
    )


def _request(args: ReviewArgs, work: Work, lesson: str | None, answer: str | None) -> str:
    lines = [ASK]
    if args.learner:
        lines.append(f"Learner: {args.learner}")
    if args.brief:
        lines.append(f"Brief:\n{args.brief}")
    if answer:
        lines.append(f"The user's answer to your question about the work: {answer}")
    if lesson:
        lines.append(f"The lesson it answers (XML):\n{lesson[:LESSON_CHARS]}")
    if args.markOutOf:
        lines.append(f"Give a mark out of {args.markOutOf}.")
    else:
        lines.append("No mark was asked for: the mark is null.")
    if work.image is not None:
        lines.append(f'The work, "{work.name}", is the image below.')
    else:
        lines.append(f'The work, "{work.name}" (a PDF, its text with page markers):\n{work.text}')
    return "\n\n".join(lines)


def review_work_tool(
    files: FileStore, lessons: LessonStore, models: Egress, system_prompt: str
) -> Tool[ReviewArgs]:
    async def run(args: ReviewArgs, context: ToolContext) -> dict[str, Any] | ToolOutput:
        lesson_id = args.lessonId or context.document_id
        lesson = None
        if lesson_id is not None:
            found = await lessons.get(context.user_id, lesson_id)
            if found is None and args.lessonId is not None:
                raise ToolError(f"There is no lesson {args.lessonId!r} among this user's lessons.")
            lesson = found.body if found is not None else None
        if not args.brief and lesson is None:
            raise ToolError(
                "Say what the work was for: give a brief (the task or its criteria) or the "
                "lesson it answers. If you do not know, ask the user."
            )
        await context.progress("Reading the work")
        work = await _work(files, context.user_id, args.file)
        images = (work.image,) if work.image is not None else ()
        asked = _request(args, work, lesson, context.answer)
        messages = [ChatMessage("user", asked, images=images)]
        for attempt in range(2):
            await context.progress("Asking again for feedback" if attempt else "Reviewing the work")
            request = ModelRequest(system=system_prompt, messages=messages)
            reply = await models.complete(context.user_id, request, "The review", context.meter)
            await context.progress("Checking the feedback")
            try:
                feedback = parse_feedback(reply, args.markOutOf)
                break
            except ValueError as exc:
                if attempt:
                    raise ToolError(f"The work could not be reviewed ({exc}).") from None
                messages += [
                    ChatMessage("assistant", reply),
                    ChatMessage("user", f"That cannot be used: {exc}. Reply with the JSON only."),
                ]
        result: dict[str, Any] = {"file": args.file, "name": work.name}
        if feedback.question is not None:
            result["status"] = "needs_answer"
            result["question"] = feedback.question.model_dump()
            result["note"] = (
                f"The work is ambiguous. Ask the user this with {QUESTION_TOOL}, then call "
                "review_work again with their answer added to the brief."
            )
            if context.answer is not None:
                return result  # asked once already: the model takes it from here
            # Asked in this task's own section; the review goes on with the answer.
            ask = Ask(
                "About the work", feedback.question.question, tuple(feedback.question.options)
            )
            return ToolOutput(result, ask=ask)
        result["status"] = "reviewed"
        result["feedback"] = feedback.model_dump(exclude={"question"})
        result["note"] = "Share this feedback with the user, warmly and concisely."
        return result

    return Tool(
        name="review_work",
        description=(
            "Review a piece of work the user attached (a photo, scan or PDF) against a "
            "brief or a lesson, giving strengths, corrections, next steps and, only when "
            "the user asks for one, a mark. Runs in the background; its result is added "
            "when ready."
        ),
        args=ReviewArgs,
        display_text=lambda args: (
            f"Reviewing {file_name(args.file).removesuffix(NORMALISED_SUFFIX)}"
        ),
        run=run,
        execution="task",
    )
