"""What a member reads of their family (its mirror in their own subtree) and of their own
settings."""

from __future__ import annotations

from typing import Literal

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
