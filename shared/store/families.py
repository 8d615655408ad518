"""The storage interface of families, their invites, and each user's membership and
mirror of the family."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from shared.schemas.server import Family, Invite, Membership

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Reads:
    """What one family change reads, all inside its transaction.

    ``token_hash`` finds the family and the invite through the token's index
    (``/inviteTokens/{hash}``) instead of ``family_id`` and ``invite_id``; ``all_invites``
    reads every invite of the family (those its ``invite_ids`` name); ``users`` are the
    users whose ``Membership`` the change judges or changes.
    """

    family_id: str | None = None
    token_hash: str | None = None
    invite_id: str | None = None
    all_invites: bool = False
    users: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Household:
    """A family and what hangs on it, as one change reads it and as it leaves it.

    ``family`` is ``None`` when there is none (yet, or any more); ``invites`` are those
    read, by id (one dropped from it is deleted, with its token); ``memberships`` are
    those of the users read (an empty ``Membership`` for a user without one).
    """

    family: Family | None = None
    invites: Mapping[str, Invite] = field(default_factory=dict)
    memberships: Mapping[str, Membership] = field(default_factory=dict)


FamilyChange = Callable[[Household], tuple[Household, R]]
"""A pure change to a household that also returns what it decided (the family as it
now is, the invite made): ``shared/families/membership.py``. It raises the refusals
(``FamilyFull``, ``InviteUsedUp``…), which abort the transaction and change nothing."""


class FamilyStore(Protocol):
    """Families at ``/families/{familyId}``, their invites and token index, and each
    user's ``Membership`` and ``FamilyMirror`` (``shared/schemas/server.py`` draws the map).

    Every change is one transaction (``apply``): what it reads is what it judged, and
    every member's mirror is written with the change, so a mirror never disagrees with
    the family for longer than the write takes to reach the reader.
    """

    async def read(self, reads: Reads) -> Household:
        """What ``reads`` names, as stored now (read together, in one transaction).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def apply(self, reads: Reads, change: FamilyChange[R]) -> tuple[Household, R]:
        """In one transaction: read what ``reads`` names, run ``change`` on it, and write
        what changed (``shared/store/households.py`` says which documents that is).

        ``change`` must be pure: on contention it runs again on the newer documents. Its
        exceptions abort the transaction (nothing is written) and propagate.

        Returns:
            The household as written, and the decision of the run that was written.

        Raises:
            StoreError: the store failed, or the change kept losing races.
        """
        ...
