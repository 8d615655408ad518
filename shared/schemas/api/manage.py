"""The bodies of a person's management of their conversations (DESIGN §15): a title,
a regenerated reply and feedback on a reply."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.schemas.api.common import Inbound
from shared.schemas.documents import MAX_COMMENT, MAX_TITLE

# A message id as the stores make them (``msg_…``): what a path or body may name.
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"


class RenameRequest(Inbound):
    """``PATCH .../conversations/{id}``: the title its owner gives it."""

    title: str = Field(
        min_length=1,
        max_length=MAX_TITLE,
        description="1 to 120 characters, not all spaces; leading and trailing spaces "
        "are dropped. A title given here is never replaced by one made automatically.",
    )

    @field_validator("title")
    @classmethod
    def _shown(cls, title: str) -> str:
        kept = title.strip()
        if not kept:
            raise ValueError("A title needs at least one character that is not a space.")
        if any(ord(c) < 32 or ord(c) == 127 for c in kept):
            raise ValueError("A title cannot hold control characters (such as new lines).")
        return kept


class ConversationInfo(BaseModel):
    """A conversation's id and title, and who gave the title."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    title: str | None
    title_source: Literal["user", "auto"] | None = Field(alias="titleSource")


class RenameResponse(BaseModel):
    """``{conversation: {id, title, titleSource}}``."""

    conversation: ConversationInfo


class RegenerateRequest(Inbound):
    """``POST .../conversations/{id}/regenerate``: make the last reply again."""

    message_id: str = Field(
        alias="messageId",
        pattern=MESSAGE_ID_PATTERN,
        description="The conversation's last reply (400 for any other message).",
    )


class FeedbackRequest(Inbound):
    """``PUT .../messages/{messageId}/feedback``: its author's rating of a reply."""

    rating: Literal["up", "down"]
    comment: str | None = Field(
        default=None,
        max_length=MAX_COMMENT,
        description="Why, in the author's words (kept for quality review).",
    )


class FeedbackInfo(BaseModel):
    """The rating as kept on the message (``feedback``)."""

    model_config = ConfigDict(populate_by_name=True)

    rating: Literal["up", "down"]
    comment: str | None = None
    at: datetime


class FeedbackResponse(BaseModel):
    """``{conversationId, messageId, feedback}``."""

    model_config = ConfigDict(populate_by_name=True)

    conversation_id: str = Field(alias="conversationId")
    message_id: str = Field(alias="messageId")
    feedback: FeedbackInfo
