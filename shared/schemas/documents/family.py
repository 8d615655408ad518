"""What a member reads of their family (its mirror in their own subtree) and of their own
settings."""

from __future__ import annotations

from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from shared.schemas.documents.base import Document, FamilyRole, Timestamp


class FamilyMember(Document):
    """One member of a family, as every member sees them (DESIGN §8)."""

    user_id: str
    display_name: str = Field(min_length=1, max_length=80)
    role: FamilyRole
    joined_at: Timestamp


class FamilyMirror(Document):
    """``/{userId}/client/family/current``: the user's family as they may read it.

    The truth is server-only (``/families/{familyId}``); every change to the family
    rewrites each member's mirror in the same transaction, and a member who leaves (or
    is removed, or whose family ends) loses theirs in it too.
    """

    family_id: str
    name: str = Field(min_length=1, max_length=80)
    my_role: FamilyRole
    members: list[FamilyMember]
    updated_at: Timestamp


class UserSettings(Document):
    """``/{userId}/client/settings/current``: the user's settings as they may read them
    (DESIGN §8). The truth is server-only (``/{userId}/server/settings/current``, the same
    fields), written with this mirror in one batch by ``PATCH /api/spark/me/settings``;
    a user without either has the defaults.

    ``ai_reads_family_messages`` false: no family message this user wrote is given to any
    model (theirs or another member's), and their own agent reads no family messages;
    checked in the store at each model call, so it holds from the next one on.
    """

    ai_reads_family_messages: bool = True
    updated_at: Timestamp | None = None


class Consent(Document):
    """Which processors a parent lets receive their dependent's data (DESIGN §16): the
    chat model's provider, speech, transcription and the moderator. A dependent's
    defaults are all ``True``: a parent's invite consents to what the service is."""

    chat: bool = True
    speech: bool = True
    transcription: bool = True
    moderation: bool = True


CLOCK_TIME = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
"""A time of day, ``HH:MM`` on a 24-hour clock."""


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``.

    Raises:
        ValueError: there is no such zone.
    """
    # A path-like name would make ``ZoneInfo`` look outside its data.
    if not name or name.startswith(("/", ".")) or ".." in name or "\\" in name:
        raise ValueError(f"{name!r} is not an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone name") from None


class QuietHours(Document):
    """A daily window (``HH:MM`` to ``HH:MM`` in ``time_zone``, an IANA name) in which a
    dependent's sends are refused; a window whose end is before its start crosses
    midnight."""

    start: str = Field(pattern=CLOCK_TIME)
    end: str = Field(pattern=CLOCK_TIME)
    time_zone: str = Field(min_length=1, max_length=64)


class Controls(Document):
    """``/{userId}/client/settings/controls``: what a dependent's parents allow (DESIGN
    §16), as the dependent may read it. The truth is server-only, beside the family
    (``/families/{familyId}``'s ``controls``), written with this mirror in one
    transaction by ``PUT /api/spark/families/{id}/members/{uid}/controls``; a dependent
    without either has the defaults (every consent, no quiet hours, no daily limit).
    """

    consent: Consent = Field(default_factory=Consent)
    quiet_hours: QuietHours | None = None
    daily_turns: int | None = Field(default=None, ge=1, le=500)
    updated_at: Timestamp | None = None
    updated_by: str | None = None


MAX_FLAGS = 100
"""The newest flags a parent's safety mirror keeps (DESIGN §16)."""


class SafetyFlag(Document):
    """One stop the moderator made for a dependent (DESIGN §16): who, when, what kind,
    which way, in which conversation; never the words."""

    id: str
    member_id: str
    category: str
    direction: Literal["input", "output"]
    conversation_id: str
    at: Timestamp


class SafetyMirror(Document):
    """``/{userId}/client/family/safety``: a parent's view of the stops made for their
    family's dependents, newest first (at most ``MAX_FLAGS``). Only parents have one:
    a dependent sees what they were told, not that a flag was raised."""

    flags: list[SafetyFlag] = Field(default_factory=list)
    updated_at: Timestamp | None = None
