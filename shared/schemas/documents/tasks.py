"""A background task as its owner reads it: its state, its updates and its key outputs."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from shared.schemas.documents.base import Document, TaskStatus, Timestamp
from shared.schemas.documents.parts import MAX_DESCRIPTION_CHARS, short


class TaskState(Document):
    """A long-running tool call's progress, shown in the conversation."""

    status: TaskStatus
    tool: str
    tool_call_id: str
    display_text: str
    updated_at: Timestamp
    error: str | None = None
    progress: str | None = None  # e.g. "Creating lesson 2 of 5", while it runs
    # False once the run that queued it was stopped: its result is kept, nobody follows up.
    follow_up: bool | None = None


class TaskUpdate(Document):
    """One progress step of a task, in order (``seq``). ``attempt`` and ``step`` key it:
    the same step of the same attempt, delivered again, is not appended twice. ``folded``
    says how many older steps this line stands for ("… 12 earlier steps")."""

    seq: int = Field(ge=1)
    at: Timestamp
    text: str
    description: str | None = None
    attempt: int = 0
    step: int = 0
    folded: int | None = None


_KEY_OUTPUT_KINDS = {
    "lesson": "A lesson card",
    "planned_lesson": "A planned lesson's card",
    "strength": "A strength",
    "correction": "A correction",
    "mark": "The mark",
    "try": "What to try",
}


class KeyOutput(Document):
    """One thing a finished task produced, for its section: a lesson (``documentId``),
    a planned lesson, a strength, a correction, a mark, or what to try after a failure.
    ``description`` says it in words, as a spoken reply reads it (DESIGN §9)."""

    model_config = ConfigDict(json_schema_extra={"required": ["kind", "text", "description"]})

    kind: str
    text: str
    document_id: str | None = None
    outline: list[str] | None = None
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)

    @model_validator(mode="after")
    def _described(self) -> KeyOutput:
        if not self.description:
            label = _KEY_OUTPUT_KINDS.get(self.kind, "An outcome")
            outline = f" It covers: {'; '.join(self.outline)}." if self.outline else ""
            self.__dict__["description"] = short(f"{label}: {self.text}.{outline}")
        return self


class TaskDocument(Document):
    """``/{userId}/client/tasks/{taskId}``: a task's section, as a client renders it.

    Its status moves only as ``shared/tasks/sections.TRANSITIONS`` allows; ``summary``
    and ``keyOutputs`` are written in the same write as its terminal status, so a
    finished task stays readable after its call has rolled over into the archive.
    """

    id: str
    conversation_id: str
    tool_call_id: str
    tool: str
    title: str
    status: TaskStatus
    created_at: Timestamp
    updated_at: Timestamp
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    updates: list[TaskUpdate] = Field(default_factory=list)
    summary: str | None = None
    key_outputs: list[KeyOutput] | None = None
    # The question a ``waiting_on_user`` task waits on (the ask_user_question call).
    question: str | None = None
