"""``create_lesson`` (a task tool): draft a full lesson plan with the model and save it
in the user's lessons, where later tools read and edit it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from shared.clock import Clock
from shared.ids import derived
from shared.llm.base import ChatMessage, ModelProvider, ModelRequest, complete_text
from shared.schemas.documents import Lesson
from shared.store.base import LessonStore
from shared.tools.base import Tool, ToolContext


class CreateLessonArgs(BaseModel):
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
        description="Anything else the plan must respect (needs, resources, prior learning).",
    )


def lesson_id_for(context: ToolContext) -> str:
    """The same tool call always makes the same lesson, however often it is retried."""
    return derived("lesson", context.conversation_id, context.tool_call_id)


def _brief(args: CreateLessonArgs) -> str:
    lines = [
        f"Topic: {args.topic}",
        f"Learners: {args.audience}",
        f"Duration: {args.duration_minutes} minutes",
    ]
    if args.objectives:
        lines.append("Objectives:\n" + "\n".join(f"- {o}" for o in args.objectives))
    if args.notes:
        lines.append(f"Notes: {args.notes}")
    return "Write the lesson plan.\n\n" + "\n".join(lines)


def _title(body: str, args: CreateLessonArgs) -> str:
    for line in body.splitlines():
        if line.startswith("# "):
            return line[2:].strip()[:200]
    return f"{args.topic[:150]} ({args.audience[:40]})"


def create_lesson_tool(
    lessons: LessonStore, provider: ModelProvider, clock: Clock, system_prompt: str
) -> Tool[CreateLessonArgs]:
    async def draft(args: CreateLessonArgs) -> str:
        request = ModelRequest(system=system_prompt, messages=[ChatMessage("user", _brief(args))])
        return (await complete_text(provider, request, "The lesson draft")).strip()

    async def run(args: CreateLessonArgs, context: ToolContext) -> dict[str, object]:
        lesson_id = lesson_id_for(context)
        lesson = await lessons.get(context.user_id, lesson_id)
        if lesson is None:
            body = await draft(args)  # provider failures are transient: the task is retried
            now = clock.now()
            lesson = await lessons.create(
                context.user_id,
                Lesson(
                    id=lesson_id,
                    title=_title(body, args),
                    topic=args.topic,
                    audience=args.audience,
                    duration_minutes=args.duration_minutes,
                    objectives=args.objectives,
                    body=body,
                    created_at=now,
                    updated_at=now,
                    conversation_id=context.conversation_id,
                    tool_call_id=context.tool_call_id,
                    model=provider.label,
                ),
            )
        return {
            "lessonId": lesson.id,
            "title": lesson.title,
            "durationMinutes": lesson.duration_minutes,
            "plan": lesson.body,
        }

    return Tool(
        name="create_lesson",
        description=(
            "Draft a complete lesson plan (objectives, timed activities, differentiation, "
            "assessment) and save it in the user's lessons. Takes a while: it runs in the "
            "background and its result is added to the conversation when ready. Use it only "
            "when the user asks for a lesson to be created."
        ),
        args=CreateLessonArgs,
        display_text="Creating lesson",
        run=run,
        execution="task",
    )
