"""The bodies of a user's settings (the AI opt-out), of an account's erasure, and of the
model a deployment runs."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
)

from shared.schemas.api.common import Inbound


class SettingsRequest(Inbound):
    """``PATCH /api/spark/me/settings``: change the caller's settings (the fields given)."""

    ai_reads_family_messages: StrictBool = Field(
        alias="aiReadsFamilyMessages",
        description="false: no family message the caller wrote is given to any model "
        "(theirs or another member's), and their own agent reads no family messages. It "
        "holds from the next model call on, also for runs already queued or waiting.",
    )


class SettingsInfo(BaseModel):
    """The caller's settings, as their mirror (`/{uid}/client/settings/current`) holds them."""

    model_config = ConfigDict(populate_by_name=True)

    ai_reads_family_messages: bool = Field(alias="aiReadsFamilyMessages")
    updated_at: datetime | None = Field(default=None, alias="updatedAt")


class ModelResponse(BaseModel):
    """``{model, demo, examples}``: which model answers. ``demo`` is true when no
    provider is configured and the demo model answers (``docs/demo.md``); ``examples``
    are then the requests it recognises, as a person would type them (empty otherwise)."""

    model: str = Field(description="The model's label, as each reply records it.")
    demo: bool = Field(description="Whether the offline demo model answers.")
    examples: list[str] = Field(
        default_factory=list, description="Requests the demo model recognises; empty otherwise."
    )


class SettingsResponse(BaseModel):
    """``{settings}``: the caller's settings after the change."""

    settings: SettingsInfo


class EraseAccountRequest(Inbound):
    """``DELETE /api/spark/me`` (and a parent's, for a dependent): the typed
    confirmation; anything else is refused (400) and nothing changes."""

    confirm: Literal["delete my account"] = Field(
        description='Exactly "delete my account": what the person typed to confirm.'
    )


class DeletionResponse(BaseModel):
    """``{deletionId}``: the erasure begun (202); its record stays, without content."""

    deletion_id: str = Field(alias="deletionId", description="The erasure's record id.")
