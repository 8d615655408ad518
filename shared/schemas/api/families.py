"""The bodies of the family routes (DESIGN §8): a family, its invites, members' roles and
lesson progress."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
)

from shared.schemas.api.common import Inbound
from shared.schemas.documents import FamilyRole
from shared.schemas.server import Family, Invite, InviteStatus

FAMILY_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


def _visible(value: str | None) -> str | None:
    """A name must show something: not blank, no control characters."""
    if value is None:
        return None
    if not value.strip():
        raise ValueError("must not be blank")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise ValueError("must not contain control characters")
    return value


class CreateFamilyRequest(Inbound):
    """``POST /api/spark/families``: a new family, with the caller as its parent."""

    name: StrictStr = Field(min_length=1, max_length=80, description="The family's name.")
    display_name: StrictStr | None = Field(
        default=None,
        alias="displayName",
        min_length=1,
        max_length=80,
        description="The name the other members will see; by default the sign-in "
        "token's name, else the part of its e-mail address before the @.",
    )

    _names = field_validator("name", "display_name")(_visible)


class InviteRequest(Inbound):
    """``POST /api/spark/families/{familyId}/invites`` (parents only)."""

    role: FamilyRole = Field(description="The role whoever joins with this link will have.")
    max_uses: StrictInt = Field(
        default=1, alias="maxUses", ge=1, le=10, description="How many people may join with it."
    )
    expires_in_hours: StrictInt = Field(
        default=72, alias="expiresInHours", ge=1, le=168, description="How long it works."
    )


class JoinRequest(Inbound):
    """``POST /api/spark/families/join``: join with an invite link's token."""

    token: StrictStr = Field(
        min_length=1, max_length=256, description="The `token` of the invite link."
    )
    display_name: StrictStr | None = Field(
        default=None,
        alias="displayName",
        min_length=1,
        max_length=80,
        description="The name the other members will see (as in CreateFamilyRequest).",
    )

    _names = field_validator("display_name")(_visible)


class RoleRequest(Inbound):
    """``PATCH /api/spark/families/{familyId}/members/{userId}`` (parents only)."""

    role: FamilyRole


class NameRequest(Inbound):
    """``PUT /api/spark/families/{familyId}/members/{userId}/name`` (oneself only)."""

    display_name: StrictStr = Field(
        alias="displayName",
        min_length=1,
        max_length=80,
        description="The name the other members will see from now on.",
    )

    _names = field_validator("display_name")(_visible)


class MemberInfo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    user_id: str = Field(alias="userId")
    display_name: str = Field(alias="displayName")
    role: FamilyRole
    joined_at: datetime = Field(alias="joinedAt")


class FamilyInfo(BaseModel):
    """A family as its members see it."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    name: str
    members: list[MemberInfo] = Field(description="In the order they joined.")
    created_at: datetime = Field(alias="createdAt")

    @classmethod
    def of(cls, family: Family) -> FamilyInfo:
        members = [MemberInfo.model_validate(m.model_dump()) for m in family.members]
        return cls(id=family.id, name=family.name, members=members, created_at=family.created_at)


class FamilyResponse(BaseModel):
    """``{family}``: the family after the change."""

    family: FamilyInfo


class InviteInfo(BaseModel):
    """An invite, without its token (the token is shown once, when it is made)."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    role: FamilyRole
    max_uses: int = Field(alias="maxUses")
    uses: int
    expires_at: datetime = Field(alias="expiresAt")
    created_at: datetime = Field(alias="createdAt")
    created_by: str = Field(alias="createdBy")
    status: InviteStatus = Field(
        description="Whether it still lets anyone join, and if not, why not."
    )

    @classmethod
    def of(cls, invite: Invite, status: InviteStatus) -> InviteInfo:
        return cls.model_validate({**invite.model_dump(), "status": status})


class InviteResponse(BaseModel):
    """``201``: the new invite, its token and link. They are shown only this once: only
    the token's SHA-256 is kept."""

    invite: InviteInfo
    token: str = Field(description="At least 128 random bits, URL-safe.")
    link: str = Field(description="`SPARK_APP_URL` + `/join?token=` + the token.")


class InvitesResponse(BaseModel):
    """``GET /api/spark/families/{familyId}/invites``: the family's invites, newest first."""

    invites: list[InviteInfo]


class LessonProgressInfo(BaseModel):
    """One lesson of a member, as their family sees its progress."""

    model_config = ConfigDict(populate_by_name=True)

    lesson_id: str = Field(alias="lessonId")
    title: str
    updated_at: datetime = Field(alias="updatedAt")
    blanks: int = Field(description="Its fill-in blanks (`<blank>`).")
    answered: int = Field(description="Blanks whose `student-answer` is not empty.")


class MemberProgressInfo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    user_id: str = Field(alias="userId")
    display_name: str = Field(alias="displayName")
    role: FamilyRole
    lessons: list[LessonProgressInfo] = Field(
        description="Their 50 most recently updated lessons, newest first."
    )


class ProgressResponse(BaseModel):
    """``GET /api/spark/families/{familyId}/progress`` (members only): each member's
    lessons, counted on the server."""

    model_config = ConfigDict(populate_by_name=True)

    family_id: str = Field(alias="familyId")
    members: list[MemberProgressInfo] = Field(description="In the order they joined.")


class SafetyFlagInfo(BaseModel):
    """One stop the moderator made for a dependent (DESIGN §16): never the words."""

    model_config = ConfigDict(populate_by_name=True)

    id: str
    member_id: str = Field(alias="memberId")
    category: str = Field(description="self_harm, sexual, violence, hate, harassment or illicit.")
    direction: Literal["input", "output"] = Field(
        description="input: the dependent's turn; output: the reply to them (withheld)."
    )
    conversation_id: str = Field(alias="conversationId")
    at: datetime


class SafetyResponse(BaseModel):
    """``GET /api/spark/families/{familyId}/safety`` (parents only): the flags raised for
    the family's dependents, newest first (at most 100)."""

    model_config = ConfigDict(populate_by_name=True)

    flags: list[SafetyFlagInfo]
    updated_at: datetime | None = Field(default=None, alias="updatedAt")
