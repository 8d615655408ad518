"""Tools that wait for a person: a question the user answers, calls the owner must
approve (deleting or restoring a lesson), and a tool the user's client carries out
(DESIGN §5; seeds 001 and 002).

Their results arrive through the API (``answers``, ``approvals``, ``tool-results``) and
resume the run the way task results do (``shared/agent/waiting/results.py``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from shared.clock import Clock
from shared.errors import NotFound, RequestError, ToolError, VersionConflict
from shared.store import versions
from shared.store.base import LessonStore, changed
from shared.tools.base import Ask, Checked, DocumentChange, Tool, ToolContext, ToolOutput

log = logging.getLogger(__name__)

QUESTION_TOOL = "ask_user_question"


class Option(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(min_length=1, max_length=80, description="A short answer to pick.")
    description: str = Field(
        default="", max_length=300, description="What choosing this answer means."
    )


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    header: str = Field(min_length=1, max_length=40, description="A very short label.")
    question: str = Field(min_length=1, max_length=500, description="The full question.")
    options: list[Option] = Field(
        min_length=2, max_length=6, description="Between 2 and 6 answers to choose from."
    )
    multiSelect: bool = Field(  # noqa: N815 (the seed's own field name)
        default=False, description="Whether the user may pick several answers."
    )

    @field_validator("options")
    @classmethod
    def _distinct_labels(cls, options: list[Option]) -> list[Option]:
        labels = [o.label for o in options]
        if len(set(labels)) != len(labels):
            raise ValueError("option labels must be different from one another")
        return options


class AskUserQuestionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    questions: list[Question] = Field(
        min_length=1, max_length=4, description="Between 1 and 4 questions to ask at once."
    )


async def _answered_by_the_user(args: BaseModel, context: ToolContext) -> Any:
    raise ToolError("This tool is answered by the user, not run by the server.")


def ask_user_question_tool() -> Tool[AskUserQuestionArgs]:
    return Tool(
        name=QUESTION_TOOL,
        description=(
            "Ask the user one to four multiple-choice questions and wait for the answers. "
            "Use it when a request is vague and the choice matters (the year group, the "
            "length, which lesson), not for small details you can decide yourself."
        ),
        args=AskUserQuestionArgs,
        display_text="Asking you a question",
        run=_answered_by_the_user,
        execution="question",
    )


def answers_output(args_json: str, answers: dict[str, str | list[str]]) -> str:
    """The user's answers to a question call, checked against its stored options, as
    the result the model reads.

    Raises:
        RequestError: an unknown question, a missing one, or a label that is not one
            of the question's options.
    """
    questions = AskUserQuestionArgs.model_validate_json(args_json).questions
    chosen: list[dict[str, object]] = []
    for index, question in enumerate(questions):
        given = answers.get(str(index))
        if given is None:
            raise RequestError(f"Question {index} ({question.header!r}) has no answer.")
        labels = [given] if isinstance(given, str) else list(given)
        if not labels or (len(labels) > 1 and not question.multiSelect):
            raise RequestError(
                f"Question {index} ({question.header!r}) takes "
                + ("one or more labels." if question.multiSelect else "exactly one label.")
            )
        if len(set(labels)) != len(labels):
            raise RequestError(f"Question {index} ({question.header!r}) repeats a label.")
        allowed = {o.label for o in question.options}
        for label in labels:
            if label not in allowed:
                raise RequestError(
                    f"{label!r} is not an option of question {index} ({question.header!r}); "
                    f"the options are: {', '.join(sorted(allowed))}."
                )
        chosen.append({"question": question.question, "answer": labels})
    extra = sorted(set(answers) - {str(i) for i in range(len(questions))})
    if extra:
        raise RequestError(f"There is no question {extra[0]} in this call.")
    return json.dumps({"answers": chosen}, ensure_ascii=False)


def question_args(ask: Ask) -> str | None:
    """A task's question as the arguments of an ``ask_user_question`` call, or ``None``
    when it cannot be one (fewer than two different answers to offer)."""
    labels = list(dict.fromkeys(o.strip()[:80] for o in ask.options if o.strip()))[:6]
    if len(labels) < 2:
        return None
    question = Question(
        header=ask.header[:40] or "A question",
        question=ask.question[:500],
        options=[Option(label=label) for label in labels],
    )
    return AskUserQuestionArgs(questions=[question]).model_dump_json(exclude_defaults=True)


def question_text(args_json: str) -> str:
    """What an ``ask_user_question`` call asks, in one line (a task section shows it)."""
    questions = AskUserQuestionArgs.model_validate_json(args_json).questions
    return " ".join(q.question for q in questions)


def answer_text(output_json: str) -> str:
    """The user's answers (``answers_output``) as the line a task tool is given."""
    try:
        chosen = json.loads(output_json).get("answers") or []
    except (ValueError, AttributeError):
        return ""
    return " ".join(
        f"Asked “{item.get('question', '')}”, they answered: {', '.join(item.get('answer') or [])}."
        for item in chosen
        if isinstance(item, dict)
    )


class EditorSelectionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def get_editor_selection_tool() -> Tool[EditorSelectionArgs]:
    return Tool(
        name="get_editor_selection",
        description=(
            "Get the text the user has selected in the document open in their editor, with "
            "the document's id. Use it when the user refers to 'this', 'the selection' or "
            "'the highlighted part'."
        ),
        args=EditorSelectionArgs,
        display_text="Reading your selection",
        run=_answered_by_the_user,
        execution="client",
    )


def _lesson_id(description: str) -> Any:
    """A ``lessonId`` argument (camelCase, as clients and prompts name it)."""
    return Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$", description=description)


class DeleteLessonArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lessonId: str = _lesson_id("The id of the lesson to delete.")  # noqa: N815


def delete_lesson_tool(lessons: LessonStore) -> Tool[DeleteLessonArgs]:
    async def check(args: DeleteLessonArgs, context: ToolContext) -> Checked[DeleteLessonArgs]:
        # The owner's card names the lesson by its title. One not found (or not read:
        # words must never refuse the call they describe) still asks, in the generic
        # words, and fails when it runs, as before.
        try:
            lesson = await lessons.get(context.user_id, args.lessonId)
        except Exception:
            log.warning("delete_lesson: the title of %s was not read", args.lessonId)
            lesson = None
        shown = None if lesson is None else f"Delete the lesson “{lesson.title}”"
        return Checked(args, display_text=shown)

    async def run(args: DeleteLessonArgs, context: ToolContext) -> dict[str, object]:
        lesson = await lessons.get(context.user_id, args.lessonId)
        if lesson is None:
            raise ToolError(f"There is no lesson with the id {args.lessonId!r}.")
        await lessons.delete(context.user_id, args.lessonId)
        return {"deleted": args.lessonId, "title": lesson.title}

    return Tool(
        name="delete_lesson",
        description=(
            "Delete one of the user's lessons. The user is asked to approve it first; only "
            "use it when they asked for the deletion. Its recent versions are kept, so "
            "restore_lesson can bring it back."
        ),
        args=DeleteLessonArgs,
        display_text="Deleting a lesson",
        run=run,
        execution="inline",
        requires_approval=True,
        check=check,
    )


class RestoreLessonArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lessonId: str = _lesson_id(  # noqa: N815
        "The id of the lesson to restore (also one that was deleted)."
    )
    version: int = Field(
        ge=1,
        description="The earlier version to bring back. Each change makes the next "
        "version and keeps the one before: after an edit that made version 5, version 4 "
        "is the lesson as it was.",
    )
    # Pinned by the check (not offered to the model): the version the owner approves
    # replacing; if the lesson has moved on by the time it runs, nothing is changed.
    replacing: SkipJsonSchema[int | None] = Field(default=None, ge=1)


def restore_lesson_tool(lessons: LessonStore, clock: Clock) -> Tool[RestoreLessonArgs]:
    async def check(args: RestoreLessonArgs, context: ToolContext) -> Checked[RestoreLessonArgs]:
        try:
            found, kept = await versions.kept_version(
                lessons, context.user_id, args.lessonId, args.version
            )
        except NotFound as exc:
            raise ToolError(exc.message) from None
        if args.replacing is not None and args.replacing != found.latest:
            raise ToolError(changed(args.replacing, found.latest))
        shown = f"Restoring version {args.version} of “{kept.title}”"
        return Checked(args.model_copy(update={"replacing": found.latest}), display_text=shown)

    async def run(args: RestoreLessonArgs, context: ToolContext) -> ToolOutput:
        try:
            restored = await versions.restore(
                lessons,
                context.user_id,
                args.lessonId,
                args.version,
                clock.now(),
                replacing=args.replacing,
            )
        except (NotFound, VersionConflict) as exc:
            raise ToolError(exc.message) from None
        return ToolOutput(
            {
                "restored": args.version,
                "documentId": restored.id,
                "title": restored.title,
                "version": restored.version,
                "note": f"Version {args.version} is the lesson again, as version "
                f"{restored.version}; the version it replaced is kept.",
            },
            DocumentChange(restored.id, restored.version),
        )

    return Tool(
        name="restore_lesson",
        description=(
            "Bring back an earlier version of one of the user's lessons (or a deleted "
            "lesson): its content becomes the lesson's next version, and the current one "
            "is kept. The user is asked to approve it first; only use it when they asked "
            "to undo a change or get a lesson back."
        ),
        args=RestoreLessonArgs,
        display_text=lambda args: f"Restoring version {args.version} of a lesson",
        run=run,
        execution="inline",
        requires_approval=True,
        check=check,
    )
