"""Which documents a family change writes: one pure plan that the in-memory fake and the
Firestore adapter both carry out, inside their transaction, so they cannot disagree.

The change itself (``shared/families/membership.py``) says only how the household
looks afterwards. From the two households, ``plan`` derives every write:

* the family: written when it changed, deleted when it is gone;
* each member's mirror (``/{uid}/client/family/current``): rewritten for every member
  whose view of the family changed (all of them when a member, a role, the name or
  ``updatedAt`` changed; none for a new invite), deleted for each one no longer in it;
* each dependent's controls mirror (``/{uid}/client/settings/controls``): written when
  their entry in the family's ``controls`` changed, deleted when it went (they left,
  became a parent, or the family ended);
* invites: each new or changed one written, and a new one's token index with it; one
  dropped from the household deleted, with its token index;
* memberships: each one that changed written whole (it was read in the transaction).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shared.schemas.documents import FamilyMirror
from shared.schemas.server import Family, InviteToken
from shared.store.base import Household

Path = tuple[str, ...]


def family_path(family_id: str) -> Path:
    return ("families", family_id)


def invites_path(family_id: str) -> Path:
    """The collection of the family's invites."""
    return (*family_path(family_id), "invites")


def invite_path(family_id: str, invite_id: str) -> Path:
    return (*invites_path(family_id), invite_id)


def token_path(token_hash: str) -> Path:
    return ("inviteTokens", token_hash)


def membership_path(user_id: str) -> Path:
    return (user_id, "server", "family", "membership")


def mirror_path(user_id: str) -> Path:
    return (user_id, "client", "family", "current")


def controls_mirror_path(user_id: str) -> Path:
    """What a dependent reads of their parents' controls (``schemas/controls.schema.json``)."""
    return (user_id, "client", "settings", "controls")


@dataclass(frozen=True, slots=True)
class Write:
    """Set ``document`` at ``path`` (whole), or delete it when ``document`` is ``None``."""

    path: Path
    document: dict[str, Any] | None


def plan(before: Household, after: Household) -> list[Write]:
    """Every write that turns ``before`` (as read) into ``after`` (as changed)."""
    return [
        *_family(before.family, after.family),
        *_controls(before.family, after.family),
        *_invites(before, after),
        *(
            Write(membership_path(uid), membership.to_firestore())
            for uid, membership in after.memberships.items()
            if membership != before.memberships.get(uid)
        ),
    ]


def _family(before: Family | None, after: Family | None) -> Iterator[Write]:
    if after == before:
        return
    if after is not None:
        yield Write(family_path(after.id), after.to_firestore())
        for member in after.members:
            mirror = after.mirror_for(member.user_id)
            if _seen(before, member.user_id) != mirror:
                yield Write(mirror_path(member.user_id), mirror.to_firestore())
    elif before is not None:
        yield Write(family_path(before.id), None)
    staying = {m.user_id for m in after.members} if after is not None else set()
    for member in before.members if before is not None else []:
        if member.user_id not in staying:
            yield Write(mirror_path(member.user_id), None)


def _controls(before: Family | None, after: Family | None) -> Iterator[Write]:
    old = before.controls if before is not None else {}
    new = after.controls if after is not None else {}
    for user_id, controls in new.items():
        if controls != old.get(user_id):
            yield Write(controls_mirror_path(user_id), controls.to_firestore())
    for user_id in old:
        if user_id not in new:
            yield Write(controls_mirror_path(user_id), None)


def _seen(family: Family | None, user_id: str) -> FamilyMirror | None:
    """What ``user_id``'s mirror showed of ``family`` (``None``: not a member then)."""
    if family is None or family.member(user_id) is None:
        return None
    return family.mirror_for(user_id)


def _invites(before: Household, after: Household) -> Iterator[Write]:
    for invite_id, invite in after.invites.items():
        old = before.invites.get(invite_id)
        if invite == old:
            continue
        yield Write(invite_path(invite.family_id, invite_id), invite.to_firestore())
        if old is None:
            token = InviteToken(family_id=invite.family_id, invite_id=invite_id)
            yield Write(token_path(invite.token_hash), token.to_firestore())
    for invite_id, invite in before.invites.items():
        if invite_id not in after.invites:
            yield Write(invite_path(invite.family_id, invite_id), None)
            yield Write(token_path(invite.token_hash), None)
