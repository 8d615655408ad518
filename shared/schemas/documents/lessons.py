"""A lesson and the earlier versions kept of it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.schemas.documents.base import Document, Timestamp


class Lesson(Document):
    """``/{userId}/client/lessons/{lessonId}``: a lesson document the agent reads and
    edits. ``body`` is lesson XML (``shared/lessons/grammar/``), valid whenever it is
    stored; ``version`` grows by one with each change (edits name the version they
    were made against), and the version a change replaces is kept (``LessonVersion``)."""

    id: str
    title: str = Field(min_length=1, max_length=200)
    body: str
    version: int = Field(ge=1)
    # "writing" while a task is still writing it (a planned lesson, titled, not drafted).
    status: Literal["writing", "ready"] = "ready"
    topic: str | None = None
    audience: str | None = None
    duration_minutes: int | None = Field(default=None, ge=1)
    objectives: list[str] | None = None
    created_at: Timestamp
    updated_at: Timestamp
    conversation_id: str | None = None
    tool_call_id: str | None = None
    model: str | None = None


class LessonVersion(Lesson):
    """``/{userId}/client/lessons/{lessonId}/versions/{version}``: the lesson as it was at
    ``version``, kept in the same write as the change that replaced it (or the deletion
    that removed it). The newest ``SPARK_LESSON_VERSIONS_KEPT`` are kept; the owner reads
    them like the lesson and restores one through the API. ``characters`` is the body's
    length, so a listing need not read the bodies."""

    characters: int = Field(ge=0)

    @classmethod
    def of(cls, lesson: Lesson) -> LessonVersion:
        return cls.model_validate({**lesson.to_firestore(), "characters": len(lesson.body)})

    def as_lesson(self) -> Lesson:
        """The lesson this version was (without the listing's ``characters``)."""
        document = self.to_firestore()
        document.pop("characters", None)
        return Lesson.model_validate(document)
