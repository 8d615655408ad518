"""``Families``: the family verbs the api offers (DESIGN §8), each one transaction of
``FamilyStore.apply`` running a pure change of ``membership.py``.

Tokens are made here and never stored: an invite keeps only the SHA-256 of its token,
which is also the id of the index document a join finds it by. A token is 32 random
bytes (256 bits), URL-safe; the hourly allowance on joins (counted before the token is
even looked at) makes guessing one hopeless twice over.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from shared.auth.base import User
from shared.clock import Clock
from shared.errors import FamilyNotFound, NoFamily
from shared.families import membership
from shared.families.membership import NOT_YOURS, Allowance, Person
from shared.ids import IdGenerator, reserved
from shared.schemas.documents import Controls, FamilyRole
from shared.schemas.server import Family, Invite, InviteStatus
from shared.store.base import FamilyStore, Reads

TOKEN_BYTES = 32
MAX_NAME_CHARS = 80
# Ids this service makes (``fam_…``, ``inv_…``); anything else names nothing (404), and
# never reaches the store as a path (nor does an id Firestore reserves: ``reserved``).
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A user id as the token verifier accepts it (``shared/auth/base.py``), but for the ids
# Firestore reserves, which ``reserved`` judges.
_UID = re.compile(r"^(?!\.\.?$)[^/]{1,128}$")
NO_NAME = "Family member"


@dataclass(frozen=True, slots=True)
class Standing:
    """A user's role in their family and, for a dependent, their parents' controls, as
    stored at the moment of reading (``None``, both, for a user in no family)."""

    role: str | None = None
    controls: Controls | None = None


@dataclass(frozen=True, slots=True)
class FamilyPolicy:
    """The limits of families; ``Settings`` gives the values."""

    app_url: str
    max_members: int = 10
    invites_per_hour: int = 20
    joins_per_hour: int = 10


@dataclass(frozen=True, slots=True)
class ListedInvite:
    """An invite and whether it still works."""

    invite: Invite
    status: InviteStatus


@dataclass(frozen=True, slots=True)
class NewInvite:
    """An invite just made: its token and link are shown this once, never again."""

    invite: Invite
    token: str
    link: str


def token_hash(token: str) -> str:
    """What an invite keeps of its token: the SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def clean_name(raw: str | None) -> str | None:
    """``raw`` without control characters or surrounding space, at most 80 characters;
    ``None`` when nothing is left."""
    if raw is None:
        return None
    kept = "".join(c for c in raw if not unicodedata.category(c).startswith("C"))
    kept = " ".join(kept.split())[:MAX_NAME_CHARS].strip()
    return kept or None


def display_name_of(user: User, chosen: str | None = None) -> str:
    """The name other members see: the one chosen, else the token's ``name``, else the
    local part of its e-mail address, else "Family member"."""
    local = (user.email or "").partition("@")[0]
    for candidate in (chosen, user.name, local):
        name = clean_name(candidate)
        if name is not None:
            return name
    return NO_NAME


def _names_one(document_id: str, pattern: re.Pattern[str] = _ID) -> bool:
    """Whether ``document_id`` could be the id of a family or an invite (or, with
    ``_UID``, of a user)."""
    return pattern.match(document_id) is not None and not reserved(document_id)


def names_one(document_id: str, *, user: bool = False) -> bool:
    """Whether ``document_id`` could name a family (or, with ``user``, a user)."""
    return _names_one(document_id, _UID if user else _ID)


def _family_id(family_id: str) -> str:
    if not _names_one(family_id):
        raise FamilyNotFound(NOT_YOURS)
    return family_id


class Families:
    """Creating, joining and leaving families, invites and roles; one per process."""

    def __init__(
        self, store: FamilyStore, clock: Clock, ids: IdGenerator, policy: FamilyPolicy
    ) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._policy = policy

    async def create(self, user: User, name: str, display_name: str | None = None) -> Family:
        """A new family with ``user`` as its parent.

        Raises:
            AlreadyInFamily: the user belongs to a family already.
        """
        family_id = self._ids.new("fam")
        change = partial(
            membership.create,
            family_id=family_id,
            name=clean_name(name) or NO_NAME,
            creator=Person(user.uid, display_name_of(user, display_name)),
            now=self._clock.now(),
        )
        _, family = await self._store.apply(Reads(family_id=family_id, users=(user.uid,)), change)
        return family

    async def current(self, user_id: str) -> Family:
        """The user's family.

        Raises:
            NoFamily: they belong to none.
        """
        standing = (await self._store.read(Reads(users=(user_id,)))).memberships[user_id]
        if standing.family_id is not None:
            family = (await self._store.read(Reads(family_id=standing.family_id))).family
            if family is not None and family.member(user_id) is not None:
                return family
        raise NoFamily(
            "You do not belong to a family yet. Create one, or ask a parent in a family "
            "for an invite link."
        )

    async def role(self, user_id: str) -> str | None:
        """The user's role in their family as stored now (``parent``, ``dependent``), or
        ``None`` in none: read afresh each time, so a change made by any process holds."""
        return (await self.standing(user_id)).role

    async def standing(self, user_id: str) -> Standing:
        """The user's role and, for a dependent, their parents' controls (DESIGN §16),
        as stored now: one read of the family gives both, afresh each time."""
        try:
            family = await self.current(user_id)
        except NoFamily:
            return Standing()
        member = family.member(user_id)
        if member is None:
            return Standing()
        return Standing(member.role, family.controls_of(user_id))

    async def _count(self, user_id: str, allowance: Allowance, limit: int) -> None:
        """One attempt against the user's hourly allowance (429 past it)."""
        change = partial(
            membership.attempt,
            user_id=user_id,
            allowance=allowance,
            now=self._clock.now(),
            limit=limit,
        )
        await self._store.apply(Reads(users=(user_id,)), change)

    async def invite(
        self,
        user_id: str,
        family_id: str,
        role: FamilyRole,
        *,
        max_uses: int = 1,
        expires_in_hours: int = 72,
    ) -> NewInvite:
        """A new invite link to the caller's family (parents only).

        Raises:
            RateLimited: the caller asked for too many links this hour.
            FamilyNotFound, ParentOnly, TooManyInvites: as ``membership.add_invite``.
        """
        await self._count(user_id, "invites", self._policy.invites_per_hour)
        family_id = _family_id(family_id)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        now = self._clock.now()
        invite = Invite(
            id=self._ids.new("inv"),
            family_id=family_id,
            role=role,
            max_uses=max_uses,
            expires_at=now + timedelta(hours=expires_in_hours),
            created_at=now,
            created_by=user_id,
            token_hash=token_hash(token),
        )
        change = partial(membership.add_invite, caller=user_id, invite=invite, now=now)
        _, made = await self._store.apply(Reads(family_id=family_id, all_invites=True), change)
        return NewInvite(made, token, f"{self._policy.app_url}/join?token={token}")

    async def invites(self, user_id: str, family_id: str) -> list[ListedInvite]:
        """The family's invites, newest first (parents only).

        Raises:
            FamilyNotFound, ParentOnly: as ``membership.parent_of``.
        """
        household = await self._store.read(Reads(family_id=_family_id(family_id), all_invites=True))
        membership.parent_of(household.family, user_id)
        newest = sorted(household.invites.values(), key=lambda i: i.created_at, reverse=True)
        now = self._clock.now()
        return [ListedInvite(invite, invite.status(now)) for invite in newest]

    async def revoke(self, user_id: str, family_id: str, invite_id: str) -> Invite:
        """The invite stops working at once (parents only).

        Raises:
            FamilyNotFound, ParentOnly, InviteNotFound: as ``membership.revoke``.
        """
        family_id = _family_id(family_id)
        change = partial(
            membership.revoke, caller=user_id, invite_id=invite_id, now=self._clock.now()
        )
        if not _names_one(invite_id):
            # Judged as any unknown id is (an outsider learns nothing), but never a path.
            change(await self._store.read(Reads(family_id=family_id)))
        _, revoked = await self._store.apply(
            Reads(family_id=family_id, invite_id=invite_id), change
        )
        return revoked

    async def join(self, user: User, token: str, display_name: str | None = None) -> Family:
        """``user`` joins the family whose invite ``token`` opens, with the invite's role.

        Raises:
            RateLimited: the user tried to join too often this hour.
            InviteNotFound, InviteRevoked, InviteUsedUp, InviteExpired, AlreadyInFamily,
                FamilyFull: as ``membership.join``.
        """
        await self._count(user.uid, "joins", self._policy.joins_per_hour)
        change = partial(
            membership.join,
            person=Person(user.uid, display_name_of(user, display_name)),
            now=self._clock.now(),
            max_members=self._policy.max_members,
        )
        reads = Reads(token_hash=token_hash(token), users=(user.uid,))
        _, family = await self._store.apply(reads, change)
        return family

    async def set_role(
        self, user_id: str, family_id: str, member_id: str, role: FamilyRole
    ) -> Family:
        """Member ``member_id`` becomes a ``role`` (parents only).

        Raises:
            FamilyNotFound, ParentOnly, MemberNotFound, LastParent: as ``membership.set_role``.
        """
        change = partial(
            membership.set_role, caller=user_id, target=member_id, role=role, now=self._clock.now()
        )
        _, family = await self._store.apply(Reads(family_id=_family_id(family_id)), change)
        return family

    async def rename(
        self, user_id: str, family_id: str, member_id: str, display_name: str
    ) -> Family:
        """The caller is called ``display_name`` in their family from now on.

        Raises:
            FamilyNotFound, Forbidden: as ``membership.rename``.
        """
        change = partial(
            membership.rename,
            caller=user_id,
            target=member_id,
            display_name=clean_name(display_name) or NO_NAME,
            now=self._clock.now(),
        )
        _, family = await self._store.apply(Reads(family_id=_family_id(family_id)), change)
        return family

    async def remove(self, user_id: str, family_id: str, member_id: str) -> Family | None:
        """Member ``member_id`` leaves (themself, or removed by a parent); the family as it
        is left, ``None`` once its last member has gone.

        Raises:
            FamilyNotFound, ParentOnly, MemberNotFound, LastParent: as ``membership.remove``.
        """
        family_id = _family_id(family_id)
        change = partial(membership.remove, caller=user_id, target=member_id, now=self._clock.now())
        if not _names_one(member_id, _UID):
            # Judged as any stranger's id is (it is nobody's), but never made a path.
            change(await self._store.read(Reads(family_id=family_id)))
        reads = Reads(family_id=family_id, all_invites=True, users=(member_id,))
        _, family = await self._store.apply(reads, change)
        return family
