"""Pure changes to a family: create, invite, revoke, join, change a role, remove or leave,
and the hourly allowances. Each takes the ``Household`` its transaction read and returns
the household it leaves plus what it decided; each refusal is an error from
``shared/errors.py`` raised before anything changes. They run inside
``FamilyStore.apply`` and may run more than once, so none has side effects; which
documents a result writes (mirrors included) is ``shared/store/households.py``'s to say.

A user's way through a family::

    no family ──create──▶ parent ◀──set_role──▶ dependent
        │                   ▲                      ▲
        └──join(invite)─────┴──────────────────────┘  (the invite's role)
    member ──remove (a parent) / leave (anyone)──▶ no family

The rules: one family per user (``already_in_family``); at most ``max_members``
(``family_full``); parents invite, revoke, change roles and remove others, dependents
do none of these (``parent_only``); each member renames only themself; a family with
members always has a parent: its last parent can be neither demoted nor removed, nor
leave while others remain (``last_parent``); the last member to leave takes the family
and its invites with them. A family that is not the caller's is ``family_not_found``
(404), never 403.

An invite is ``active`` until it is revoked, used ``max_uses`` times or past its
``expires_at``, whichever comes first; a join redeems one use, in the same transaction
that checks it, so two people racing for the last use get one success and one
``invite_used_up``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from shared.errors import (
    AlreadyInFamily,
    FamilyFull,
    FamilyNotFound,
    Forbidden,
    InviteExpired,
    InviteGone,
    InviteNotFound,
    InviteRevoked,
    InviteUsedUp,
    LastParent,
    MemberNotFound,
    ParentOnly,
    RateLimited,
    TooManyInvites,
)
from shared.schemas.documents import Controls, FamilyMember, FamilyRole
from shared.schemas.server import Family, Invite, InviteStatus, Membership
from shared.store.base import Household

# Invite links a family may have working at once, and invites it keeps in all (ended
# ones, shown to its parents as such, are dropped oldest first past that): bounded, so
# the transaction that ends a family deletes them all (well under Firestore's 500
# writes a transaction).
MAX_OPEN_INVITES = 20
MAX_KEPT_INVITES = 50
HOUR = timedelta(hours=1)

Allowance = Literal["invites", "joins"]

NO_INVITE = "Your family has no invite with this id. List your family's invites to find it."
NO_MEMBER = "Nobody with this id belongs to your family. Check the id in your family's member list."
NOT_YOURS = (
    "You do not belong to a family with this id. Check the id, or fetch your own family "
    "with GET /api/spark/families/current."
)
ASK_FOR_A_NEW_LINK = "Ask a parent in the family for a new invite link."


@dataclass(frozen=True, slots=True)
class Person:
    """Someone joining or creating a family, under the name the others will see."""

    user_id: str
    display_name: str


def member_of(family: Family | None, caller: str) -> tuple[Family, FamilyMember]:
    """The family and the caller's place in it.

    Raises:
        FamilyNotFound: it is not the caller's family (or there is none).
    """
    me = None if family is None else family.member(caller)
    if family is None or me is None:
        raise FamilyNotFound(NOT_YOURS)
    return family, me


def parent_of(family: Family | None, caller: str) -> Family:
    """The family, if the caller is one of its parents.

    Raises:
        FamilyNotFound: it is not the caller's family.
        ParentOnly: the caller is a dependent in it.
    """
    family, me = member_of(family, caller)
    if me.role != "parent":
        raise ParentOnly("Only a parent in your family can do this. Ask a parent to do it.")
    return family


def _standing(household: Household, user_id: str) -> Membership:
    return household.memberships.get(user_id) or Membership()


def create(
    household: Household, *, family_id: str, name: str, creator: Person, now: datetime
) -> tuple[Household, Family]:
    """A new family whose one member, a parent, is ``creator``.

    Raises:
        AlreadyInFamily: the creator belongs to a family already.
    """
    mine = _standing(household, creator.user_id)
    if mine.family_id is not None:
        raise AlreadyInFamily("You already belong to a family. Leave it before you create another.")
    if household.family is not None:  # a random id met an existing family: never in practice
        raise ValueError(f"family {family_id} exists already")
    founder = FamilyMember(
        user_id=creator.user_id, display_name=creator.display_name, role="parent", joined_at=now
    )
    family = Family(id=family_id, name=name, members=[founder], created_at=now, updated_at=now)
    memberships = {**household.memberships, creator.user_id: _joined(mine, family_id)}
    return replace(household, family=family, memberships=memberships), family


def _joined(mine: Membership, family_id: str | None) -> Membership:
    return mine.model_copy(update={"family_id": family_id})


def add_invite(
    household: Household, *, caller: str, invite: Invite, now: datetime
) -> tuple[Household, Invite]:
    """Keep ``invite`` (made by the service, with its token's hash), read with all the
    family's invites.

    Raises:
        FamilyNotFound, ParentOnly: as ``parent_of``.
        TooManyInvites: the family has ``MAX_OPEN_INVITES`` working links already.
    """
    family = parent_of(household.family, caller)
    kept = dict(household.invites)
    if sum(1 for i in kept.values() if i.status(now) == "active") >= MAX_OPEN_INVITES:
        raise TooManyInvites(
            f"Your family already has {MAX_OPEN_INVITES} invite links that still work. "
            "Revoke one you no longer need, then try again."
        )
    ended = sorted(
        (i for i in kept.values() if i.status(now) != "active"), key=lambda i: i.created_at
    )
    while len(kept) >= MAX_KEPT_INVITES and ended:
        del kept[ended.pop(0).id]
    made = invite.model_copy(update={"family_id": family.id})
    kept[made.id] = made
    listed = family.model_copy(update={"invite_ids": list(kept)})
    return replace(household, family=listed, invites=kept), made


def revoke(
    household: Household, *, caller: str, invite_id: str, now: datetime
) -> tuple[Household, Invite]:
    """The invite stops working at once (revoking it again changes nothing).

    Raises:
        FamilyNotFound, ParentOnly: as ``parent_of``.
        InviteNotFound: the family has no invite with this id.
    """
    family = parent_of(household.family, caller)
    invite = household.invites.get(invite_id)
    if invite is None or invite.family_id != family.id:
        raise InviteNotFound(NO_INVITE)
    if invite.revoked_at is not None:
        return household, invite
    revoked = invite.model_copy(update={"revoked_at": now})
    return replace(household, invites={**household.invites, invite_id: revoked}), revoked


_GONE: dict[InviteStatus, tuple[type[InviteGone], str]] = {
    "revoked": (InviteRevoked, "This invite link was cancelled by a parent in the family."),
    "used_up": (InviteUsedUp, "This invite link has been used as often as it allows."),
    "expired": (InviteExpired, "This invite link has expired."),
}


def join(
    household: Household, *, person: Person, now: datetime, max_members: int
) -> tuple[Household, Family]:
    """``person`` joins the family of the invite the token opened, with its role, using
    one of its uses. Joining a family one is already in changes nothing (a retried join
    whose answer was lost gets the family, not an error).

    Raises:
        InviteNotFound: no invite has this token.
        InviteRevoked, InviteUsedUp, InviteExpired: the invite no longer works.
        AlreadyInFamily: ``person`` belongs to another family.
        FamilyFull: the family has ``max_members`` members.
    """
    invite = next(iter(household.invites.values()), None)
    family = household.family
    if invite is None or family is None:
        raise InviteNotFound(
            "This invite link is not valid. Check that you have the whole link, or ask "
            "a parent in the family for a new one."
        )
    if family.member(person.user_id) is not None:
        return household, family
    status = invite.status(now)
    if status != "active":
        error, why = _GONE[status]
        raise error(f"{why} {ASK_FOR_A_NEW_LINK}")
    mine = _standing(household, person.user_id)
    if mine.family_id is not None:
        raise AlreadyInFamily(
            "You already belong to a family. Leave it first, then open the invite link again."
        )
    if len(family.members) >= max_members:
        raise FamilyFull(
            f"This family already has {len(family.members)} members, the most a family can "
            "have. Ask a parent in the family to make room, then open the link again."
        )
    member = FamilyMember(
        user_id=person.user_id, display_name=person.display_name, role=invite.role, joined_at=now
    )
    joined = family.model_copy(update={"members": [*family.members, member], "updated_at": now})
    used = invite.model_copy(
        update={"uses": invite.uses + 1, "used_by": [*invite.used_by, person.user_id]}
    )
    after = Household(
        family=joined,
        invites={**household.invites, invite.id: used},
        memberships={**household.memberships, person.user_id: _joined(mine, family.id)},
    )
    return after, joined


def _member_named(family: Family, user_id: str) -> FamilyMember:
    member = family.member(user_id)
    if member is None:
        raise MemberNotFound(NO_MEMBER)
    return member


def set_role(
    household: Household, *, caller: str, target: str, role: FamilyRole, now: datetime
) -> tuple[Household, Family]:
    """``target`` becomes a ``role`` (already being one changes nothing).

    Raises:
        FamilyNotFound, ParentOnly: as ``parent_of``.
        MemberNotFound: ``target`` is not in the family.
        LastParent: ``target`` is its only parent and would become a dependent.
    """
    family = parent_of(household.family, caller)
    member = _member_named(family, target)
    if member.role == role:
        return household, family
    if member.role == "parent" and len(family.parents) == 1:
        raise LastParent(
            "You are the family's only parent, so you cannot become a dependent. "
            "Make another member a parent first."
        )
    members = [
        m.model_copy(update={"role": role}) if m.user_id == target else m for m in family.members
    ]
    # A dependent made a parent is controlled by no one: their controls go with the role.
    controls = {uid: c for uid, c in family.controls.items() if uid != target}
    changed = family.model_copy(
        update={"members": members, "updated_at": now, "controls": controls}
    )
    return replace(household, family=changed), changed


def set_controls(
    household: Household, *, caller: str, target: str, controls: Controls
) -> tuple[Household, Family]:
    """``target``'s parents' controls are ``controls`` from now on (DESIGN §16).

    Raises:
        FamilyNotFound: it is not the caller's family, the caller is not a parent in it,
            or ``target`` is not a dependent of it (404, never 403: nothing is told).
    """
    family = household.family
    me = None if family is None else family.member(caller)
    if family is None or me is None or me.role != "parent":
        raise FamilyNotFound(NOT_YOURS)
    if family.controls_of(target) is None:
        raise FamilyNotFound(NOT_YOURS)
    changed = family.model_copy(update={"controls": {**family.controls, target: controls}})
    return replace(household, family=changed), changed


def rename(
    household: Household, *, caller: str, target: str, display_name: str, now: datetime
) -> tuple[Household, Family]:
    """``target`` (the caller themself) is called ``display_name`` in the family from now
    on; what they wrote before keeps the name it was written under.

    Raises:
        FamilyNotFound: it is not the caller's family.
        Forbidden: ``target`` is someone else: each member chooses their own name.
    """
    family, me = member_of(household.family, caller)
    if target != caller:
        raise Forbidden("You can change only your own name in the family.")
    if me.display_name == display_name:
        return household, family
    members = [
        m.model_copy(update={"display_name": display_name}) if m.user_id == caller else m
        for m in family.members
    ]
    changed = family.model_copy(update={"members": members, "updated_at": now})
    return replace(household, family=changed), changed


def remove(
    household: Household, *, caller: str, target: str, now: datetime
) -> tuple[Household, Family | None]:
    """``target`` leaves the family (``caller`` themself, or removed by a parent). The
    last member leaving ends the family: it and its invites go (``None``), so the
    household must have been read with all its invites.

    Raises:
        FamilyNotFound: it is not the caller's family.
        ParentOnly: a dependent tried to remove someone else.
        MemberNotFound: ``target`` is not in the family.
        LastParent: ``target`` is the only parent and others remain.
    """
    family, _ = member_of(household.family, caller)
    if target != caller:
        parent_of(family, caller)
    leaving = _member_named(family, target)
    rest = [m for m in family.members if m.user_id != target]
    if rest and leaving.role == "parent" and not any(m.role == "parent" for m in rest):
        raise LastParent(
            "You are the family's only parent. Make another member a parent before you "
            "leave, or remove the other members first."
        )
    memberships = {
        **household.memberships,
        target: _joined(_standing(household, target), None),
    }
    if not rest:
        return Household(family=None, invites={}, memberships=memberships), None
    controls = {uid: c for uid, c in family.controls.items() if uid != target}
    left = family.model_copy(update={"members": rest, "updated_at": now, "controls": controls})
    return replace(household, family=left, memberships=memberships), left


_ALLOWANCE_FIELD: dict[Allowance, str] = {"invites": "invites_asked", "joins": "joins_tried"}
_ALLOWANCE_WORDS: dict[Allowance, str] = {
    "invites": "asked for {limit} invite links",
    "joins": "tried to join a family {limit} times",
}


def within_hour(times: Sequence[datetime], now: datetime, limit: int, did: str) -> list[datetime]:
    """The times of the last hour with ``now`` added, the newest ``limit`` kept.

    Raises:
        RateLimited: ``limit`` fall within the hour already ("You have {did} in the last
            hour"); ``retry_after`` is when the oldest of them leaves it.
    """
    recent = sorted(t for t in times if now - t < HOUR)
    if len(recent) < limit:
        return [*recent, now][-limit:]
    wait = math.ceil((recent[len(recent) - limit] + HOUR - now).total_seconds())
    minutes = max(1, math.ceil(wait / 60))
    raise RateLimited(
        f"You have {did} in the last hour, the most allowed. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
        wait,
        limit="family_changes",
    )


def attempt(
    household: Household, *, user_id: str, allowance: Allowance, now: datetime, limit: int
) -> tuple[Household, None]:
    """Count one attempt against the user's hourly ``allowance`` (every attempt counts,
    whether or not it then succeeds: a guessed token costs one).

    Raises:
        RateLimited: the user has used up the hour's allowance.
    """
    mine = _standing(household, user_id)
    field = _ALLOWANCE_FIELD[allowance]
    did = _ALLOWANCE_WORDS[allowance].format(limit=limit)
    kept = within_hour(getattr(mine, field), now, limit, did)
    counted = mine.model_copy(update={field: kept})
    return replace(household, memberships={**household.memberships, user_id: counted}), None
