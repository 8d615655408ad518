"""The task tools that write lessons: ``create_lesson`` (one, from a brief) and
``plan_lessons`` (a sequence of up to ten, planned then written one by one).

The model writes lesson XML (``prompts/lesson.md``, which the wiring follows with every
skill, so the drafting model knows each exercise's exact XML). A draft that is not a
valid lesson goes back to the model once with the validator's error; a second failure
is reported to the agent, never stored. Lesson ids derive from the tool call, so a
retried task finds what it already made instead of making it twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from xml.sax.saxutils import escape

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.clock import Clock
from shared.egress.gate import Egress
from shared.errors import ToolError, VersionConflict
from shared.ids import derived
from shared.lessons.grammar import InvalidLesson, ParsedLesson, validate
from shared.llm.base import (
    ChatMessage,
    ModelRequest,
    json_in,
    unfenced,
)
from shared.schemas.documents import Lesson
from shared.store.base import LessonStore
from shared.tools.base import DocumentChange, Tool, ToolContext, ToolOutput

MAX_PLANNED = 10


class LessonBrief(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(
        min_length=2, max_length=200, description="What the lesson teaches, e.g. 'fractions'."
    )
    audience: str = Field(
        min_length=2,
        max_length=100,
        description="Who it is for: age, year group or level, e.g. 'Year 4 (ages 8-9)'.",
    )
    duration_minutes: int = Field(
        default=45, ge=10, le=180, description="How long the lesson lasts, in minutes."
    )
    objectives: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Two to four learning objectives, each starting with a verb.",
    )
    notes: str = Field(
        default="",
        max_length=2000,
        description="Anything else to respect: exercise types wanted, needs, prior learning.",
    )


class PlanArgs(LessonBrief):
    count: int = Field(ge=1, le=MAX_PLANNED, description="How many lessons, at most 10.")
    topic: str = Field(
        min_length=2,
        max_length=200,
        description="What the sequence teaches as a whole, e.g. 'the water cycle'.",
    )


def _brief(args: LessonBrief, focus: str | None = None, place: str | None = None) -> str:
    lines = [
        f"Topic: {args.topic}",
        f"Learners: {args.audience}",
        f"Duration: {args.duration_minutes} minutes",
    ]
    if place:
        lines.append(place)
    if focus:
        lines.append(f"This lesson: {focus}")
    if args.objectives:
        lines.append("Objectives:\n" + "\n".join(f"- {o}" for o in args.objectives))
    if args.notes:
        lines.append(f"Notes: {args.notes}")
    return "Write the lesson.\n\n" + "\n".join(lines)


def extract_lesson(reply: str) -> str:
    """The ``<lesson>…</lesson>`` in a model's reply (without any code fence or
    commentary around it); the reply itself when there is none, so validation says why."""
    text = unfenced(reply)
    start, end = text.find("<lesson"), text.rfind("</lesson>")
    if start < 0 or end < start:
        return text
    return text[start : end + len("</lesson>")]


def title_of(lesson: ParsedLesson, fallback: str) -> str:
    heading = next((n for n in lesson.root.walk() if n.tag == "h1"), None)
    title = " ".join(heading.all_text().split()) if heading else ""
    return (title or fallback)[:200]


def outline(lesson: ParsedLesson) -> list[str]:
    """The lesson's headings and exercises, for the agent to sum up without reading it."""
    items = []
    for node in lesson.root.children:
        if node.tag in ("h1", "h2"):
            items.append(" ".join(node.all_text().split()))
        elif node.tag == "exercise":
            items.append(f'exercise "{node.attrs["id"]}" ({node.attrs["type"]})')
    return items[:40]


class Drafter:
    """Writes valid lesson XML with the model: one draft, and one repair if needed."""

    def __init__(self, models: Egress, system_prompt: str, plan_prompt: str = "") -> None:
        self.models = models
        self.system_prompt = system_prompt
        self.plan_prompt = plan_prompt

    async def draft(
        self,
        brief: str,
        context: ToolContext,
        report: Callable[[str], Awaitable[None]] | None = None,
    ) -> tuple[str, ParsedLesson]:
        """The body and its parsed lesson; ``report`` (a task's progress) is told of
        each draft and each check.

        Raises:
            ToolError: the model's draft and its repair were both invalid, or the user's
                tokens for today are spent.
            ProviderError: the model failed (transient: the task is retried).
        """
        messages = [ChatMessage("user", brief)]
        for attempt in range(2):
            if report is not None:
                await report("Correcting the draft" if attempt else "Drafting the lesson")
            request = ModelRequest(system=self.system_prompt, messages=messages)
            reply = await self.models.complete(
                context.user_id, request, "The lesson draft", context.meter
            )
            if report is not None:
                await report("Checking the draft")
            body = extract_lesson(reply)
            try:
                return body, validate(body)
            except InvalidLesson as exc:
                if attempt:
                    raise ToolError(
                        "The lesson could not be written as valid lesson XML "
                        f"({exc.message}). Try again, perhaps with a simpler brief."
                    ) from None
                messages += [
                    ChatMessage("assistant", reply),
                    ChatMessage(
                        "user",
                        f"That is not a valid lesson: {exc.message} Reply with the whole "
                        "corrected lesson XML only.",
                    ),
                ]
        raise AssertionError("unreachable")

    async def plan(self, args: PlanArgs, context: ToolContext) -> list[tuple[str, str]]:
        """``args.count`` (title, focus) pairs, in teaching order.

        Raises:
            ToolError: the model gave no usable plan, twice; or today's tokens are spent.
        """
        ask = (
            f"Plan a sequence of {args.count} lessons.\n\n"
            + _brief(args).removeprefix("Write the lesson.").strip()
            + f'\n\nReply with JSON only: {{"lessons": [{{"title": "...", "focus": '
            f'"what this lesson covers, one sentence"}}, ...]}} with exactly {args.count} '
            "entries, in teaching order."
        )
        messages = [ChatMessage("user", ask.strip())]
        for attempt in range(2):
            request = ModelRequest(system=self.plan_prompt, messages=messages)
            reply = await self.models.complete(
                context.user_id, request, "The lesson plan", context.meter
            )
            try:
                return _parse_plan(reply, args.count)
            except ValueError as exc:
                if attempt:
                    raise ToolError(f"The lessons could not be planned ({exc}).") from None
                messages += [
                    ChatMessage("assistant", reply),
                    ChatMessage(
                        "user", f"That plan cannot be used: {exc}. Reply with the JSON only."
                    ),
                ]
        raise AssertionError("unreachable")


class _PlanEntry(BaseModel):
    title: str = Field(min_length=1, max_length=200)
    focus: str = Field(default="", max_length=1000)


class _Plan(BaseModel):
    lessons: list[_PlanEntry]


def _parse_plan(reply: str, count: int) -> list[tuple[str, str]]:
    try:
        plan = _Plan.model_validate(json_in(reply))
    except (ValueError, ValidationError):
        raise ValueError('it is not JSON of the form {"lessons": [{"title", "focus"}]}') from None
    if len(plan.lessons) != count:
        raise ValueError(f"it has {len(plan.lessons)} lessons, not {count}")
    return [(e.title.strip(), e.focus.strip()) for e in plan.lessons]


def lesson_id_for(context: ToolContext, index: int | None = None) -> str:
    """The same tool call always makes the same lesson(s), however often it is retried."""
    if index is None:
        return derived("lesson", context.conversation_id, context.tool_call_id)
    return derived("lesson", context.conversation_id, context.tool_call_id, str(index))


def new_lesson(
    context: ToolContext, lesson_id: str, title: str, body: str, brief: LessonBrief, now: datetime
) -> Lesson:
    """Version 1 of a lesson the tool call in ``context`` makes."""
    return Lesson(
        id=lesson_id,
        title=title[:200],
        body=body,
        version=1,
        topic=brief.topic,
        audience=brief.audience,
        duration_minutes=brief.duration_minutes,
        created_at=now,
        updated_at=now,
        conversation_id=context.conversation_id,
        tool_call_id=context.tool_call_id,
    )


def create_lesson_tool(
    lessons: LessonStore, models: Egress, clock: Clock, system_prompt: str
) -> Tool[LessonBrief]:
    drafter = Drafter(models, system_prompt)

    async def run(args: LessonBrief, context: ToolContext) -> ToolOutput:
        lesson_id = lesson_id_for(context)
        stored = await lessons.get(context.user_id, lesson_id)
        if stored is None:
            body, parsed = await drafter.draft(_brief(args), context, context.progress)
            await context.progress("Saving the lesson")
            now = clock.now()
            made = new_lesson(context, lesson_id, title_of(parsed, args.topic), body, args, now)
            stored = await lessons.create(
                context.user_id,
                made.model_copy(update={"objectives": args.objectives, "model": models.label}),
            )
        return ToolOutput(
            {
                "documentId": stored.id,
                "title": stored.title,
                "version": stored.version,
                "outline": outline(validate(stored.body)),
                "note": "The lesson is open in this conversation now; read_document shows it.",
            },
            DocumentChange(stored.id, stored.version),
        )

    return Tool(
        name="create_lesson",
        description=(
            "Write a complete lesson (objectives, timed activities, exercises) from a brief "
            "and save it in the user's lessons; it becomes the lesson open in this "
            "conversation. Takes a while: it runs in the background and its result is added "
            "when ready. Use it only when the user asks for a new lesson."
        ),
        args=LessonBrief,
        display_text="Creating lesson",
        run=run,
        execution="task",
    )


def _placeholder(title: str) -> str:

    return f"<lesson>\n<h1>{escape(title)}</h1>\n<p>This lesson is being written.</p>\n</lesson>"


def plan_lessons_tool(
    lessons: LessonStore,
    models: Egress,
    clock: Clock,
    system_prompt: str,
    plan_prompt: str,
) -> Tool[PlanArgs]:
    drafter = Drafter(models, system_prompt, plan_prompt)

    async def placeholders(args: PlanArgs, context: ToolContext) -> list[Lesson]:
        """Every lesson of the sequence, titled: planned now, or found from a previous
        attempt (so a retry keeps the plan the user already sees)."""
        found = [
            await lessons.get(context.user_id, lesson_id_for(context, i)) for i in range(args.count)
        ]
        if all(found):
            return [lesson for lesson in found if lesson is not None]
        await context.progress(f"Planning {args.count} lessons")
        plan = await drafter.plan(args, context)
        now = clock.now()
        made = []
        for index, (lesson, (title, focus)) in enumerate(zip(found, plan, strict=True)):
            if lesson is None:
                planned = new_lesson(
                    context, lesson_id_for(context, index), title, _placeholder(title), args, now
                )
                update = {"status": "writing", "topic": focus or title, "model": models.label}
                lesson = await lessons.create(context.user_id, planned.model_copy(update=update))
            made.append(lesson)
        return made

    async def write(
        args: PlanArgs,
        context: ToolContext,
        lesson: Lesson,
        index: int,
        sequence: Sequence[Lesson],
    ) -> Lesson:
        others = "; ".join(f"{i + 1}. {s.title}" for i, s in enumerate(sequence))
        brief = _brief(
            args,
            focus=f"{lesson.title}: {lesson.topic}",
            place=f"Lesson {index + 1} of {len(sequence)} in the sequence: {others}",
        )
        body, parsed = await drafter.draft(brief, context)
        written = lesson.model_copy(
            update={
                "body": body,
                "title": title_of(parsed, lesson.title),
                "version": lesson.version + 1,
                "status": "ready",
                "updated_at": clock.now(),
            }
        )
        try:
            return await lessons.replace(context.user_id, written, lesson.version)
        except VersionConflict:
            return lesson  # written by an earlier attempt meanwhile

    async def run(args: PlanArgs, context: ToolContext) -> ToolOutput:
        sequence = await placeholders(args, context)
        done = []
        for index, lesson in enumerate(sequence):
            if lesson.status == "writing":
                await context.progress(f"Creating lesson {index + 1} of {len(sequence)}")
                lesson = await write(args, context, lesson, index, sequence)
            done.append(lesson)
        return ToolOutput(
            {
                "lessons": [
                    {"documentId": s.id, "title": s.title, "version": s.version} for s in done
                ],
                "note": "The first lesson is open in this conversation now.",
            },
            DocumentChange(done[0].id, done[0].version),
        )

    return Tool(
        name="plan_lessons",
        description=(
            "Plan a sequence of lessons (at most 10) on one topic and write each of them, "
            "saved in the user's lessons. Runs in the background and shows its progress; "
            "its result is added when every lesson is written. Use it when the user asks "
            "for several lessons or a unit of work."
        ),
        args=PlanArgs,
        display_text=lambda args: f"Planning {args.count} lessons",
        run=run,
        execution="task",
    )
