"""The errors of the family routes (DESIGN §8): who may act, which family, member or
invite, and the limits of a family."""

from __future__ import annotations

from typing import Literal

from shared.errors.requests import Forbidden, NotFound, RequestError


class ParentOnly(Forbidden):
    """Only a parent of the family may do this (invite, revoke, change roles, remove)."""

    code = "parent_only"


ControlReason = Literal["consent", "quiet_hours", "daily_limit"]


class ParentControls(Forbidden):
    """A dependent's parent does not allow this now (DESIGN §16): ``reason`` says which
    control: ``consent`` (a processor the parent has not consented to), ``quiet_hours``
    or ``daily_limit``. Raised before any provider is asked."""

    code = "parent_controls"

    def __init__(self, message: str, reason: ControlReason, detail: str | None = None) -> None:
        super().__init__(message, detail)
        self.reason: ControlReason = reason


class NoFamily(NotFound):
    """The caller belongs to no family."""

    code = "no_family"


class FamilyNotFound(NotFound):
    """No family with this id is the caller's: whether it exists is not said (no
    enumeration), so it is never 403."""

    code = "family_not_found"


class MemberNotFound(NotFound):
    """The user named is not a member of the caller's family."""

    code = "member_not_found"


class InviteNotFound(NotFound):
    """No invite has this token (unknown or forged), or the caller's family has no
    invite with this id."""

    code = "invite_not_found"


class AlreadyInFamily(RequestError):
    """One family per user: the caller already belongs to one."""

    status = 409
    code = "already_in_family"


class FamilyFull(RequestError):
    """The family has as many members as it may (``SPARK_FAMILY_MAX_MEMBERS``)."""

    status = 409
    code = "family_full"


class LastParent(RequestError):
    """The change would leave a family with members but no parent."""

    status = 409
    code = "last_parent"


class TooManyInvites(RequestError):
    """The family has as many open invite links as it may keep."""

    status = 409
    code = "too_many_invites"


class InviteGone(RequestError):
    """The invite existed but can no longer be used; a new link is needed."""

    status = 410
    code = "invite_gone"


class InviteExpired(InviteGone):
    code = "invite_expired"


class InviteUsedUp(InviteGone):
    code = "invite_used_up"


class InviteRevoked(InviteGone):
    code = "invite_revoked"
