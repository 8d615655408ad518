"""The invariant of a family's stored state, checked on the documents alone (pure):
every member has exactly one mirror, and it matches the family; nobody else's mirror
names the family; each member's ``Membership`` points at it, and nobody else's does;
only its dependents have controls (DESIGN §16).

Each user has one mirror path (``/{uid}/client/family/current``), so "exactly one"
means it exists; "matches" means it is what ``Family.mirror_for`` makes of the family,
field for field. ``tools/audit.py`` calls it for every family its users are in (so
every end-to-end test checks it), as do the family tests after each step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from shared.schemas.documents import FamilyMirror
from shared.schemas.server import Family, Membership

Stored = Mapping[str, Any]

# The stored name of a mirror's family id (its schema's alias): a mirror that is not
# valid is still checked for naming the family.
_FAMILY_ID = FamilyMirror.model_fields["family_id"].alias or "family_id"


def family_violations(
    family_doc: Stored | None,
    mirrors: Mapping[str, Stored | None],
    memberships: Mapping[str, Stored | None] | None = None,
    *,
    family_id: str | None = None,
) -> list[str]:
    """What is wrong with one family's documents.

    Args:
        family_doc: ``/families/{familyId}`` as stored (``None``: there is none, e.g.
            after its last member left; then ``family_id`` names it).
        mirrors: ``/{uid}/client/family/current`` of every member, and of anyone else
            worth checking (a former member), by user id; ``None`` where there is none.
        memberships: likewise ``/{uid}/server/family/membership``, if they were read.
        family_id: the family's id when ``family_doc`` is ``None``.
    """
    try:
        family = None if family_doc is None else Family.model_validate(family_doc)
    except ValidationError as exc:
        return [f"the family document is not valid: {exc.error_count()} errors"]
    fid = family.id if family is not None else family_id
    found = [] if family is None else _family_shape(family)
    members = set() if family is None else {m.user_id for m in family.members}
    for uid, stored in mirrors.items():
        found += _mirror(family, fid, uid, stored, is_member=uid in members)
    for uid in sorted(members - set(mirrors)):
        found.append(f"{uid}: a member whose mirror was not checked")
    for uid, stored in (memberships or {}).items():
        pointer = Membership.model_validate(stored or {}).family_id
        if uid in members and pointer != fid:
            found.append(f"{uid}: a member whose membership names {pointer!r}, not {fid}")
        elif uid not in members and pointer == fid:
            found.append(f"{uid}: not a member, but their membership names {fid}")
    return found


def _family_shape(family: Family) -> list[str]:
    found = []
    ids = [m.user_id for m in family.members]
    if len(set(ids)) != len(ids):
        found.append(f"family {family.id}: a member is listed twice")
    if not family.members:
        found.append(f"family {family.id}: no members left, yet the family remains")
    elif not family.parents:
        found.append(f"family {family.id}: members but no parent")
    for uid in sorted(family.controls):
        if family.controls_of(uid) is None:
            found.append(f"family {family.id}: controls for {uid}, who is not a dependent of it")
    return found


def _mirror(
    family: Family | None, fid: str | None, uid: str, stored: Stored | None, *, is_member: bool
) -> list[str]:
    if not is_member:
        names = stored is not None and stored.get(_FAMILY_ID) == fid
        return [f"{uid}: not a member, but their mirror shows family {fid}"] if names else []
    assert family is not None  # only a family has members
    if stored is None:
        return [f"{uid}: a member of {family.id} without a mirror"]
    try:
        mirror = FamilyMirror.model_validate(stored)
    except ValidationError:
        return [f"{uid}: the mirror is not a valid family document"]
    if mirror != family.mirror_for(uid):
        return [f"{uid}: the mirror does not match family {family.id}"]
    return []
