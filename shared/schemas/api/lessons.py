"""The bodies of a lesson's kept versions: listing them and restoring one."""

from __future__ import annotations

from datetime import datetime

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
)

from shared.schemas.api.common import Inbound


class RestoreRequest(Inbound):
    """``POST /api/spark/lessons/{lessonId}/restore``: the kept version to bring back."""

    version: StrictInt = Field(ge=1, le=2**31, description="A kept version (see .../versions).")


class KeptVersionInfo(BaseModel):
    """One kept version of a lesson."""

    model_config = ConfigDict(populate_by_name=True)

    version: int
    title: str
    saved_at: datetime = Field(alias="savedAt", description="When this version was saved.")
    characters: int = Field(description="The length of its body.")


class LessonVersionsResponse(BaseModel):
    """``GET /api/spark/lessons/{lessonId}/versions``: the kept versions, newest first;
    ``currentVersion`` is ``null`` for a deleted lesson (a restore brings it back)."""

    model_config = ConfigDict(populate_by_name=True)

    lesson_id: str = Field(alias="lessonId")
    current_version: int | None = Field(alias="currentVersion")
    versions: list[KeptVersionInfo]


class RestoreResponse(BaseModel):
    """The restored content is the lesson's new version (the one it replaced is kept)."""

    model_config = ConfigDict(populate_by_name=True)

    lesson_id: str = Field(alias="lessonId")
    version: int = Field(description="The lesson's version now.")
    restored_from: int = Field(alias="restoredFrom")
