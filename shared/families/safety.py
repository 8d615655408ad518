"""Parents told, children respected (DESIGN §16): each stop the moderator makes for a
dependent becomes a flag (member, time, category, direction, conversation; never the
words) in every parent's safety mirror, which only parents read
(``GET /api/spark/families/{id}/safety``, ``/{uid}/client/family/safety``). The
dependent sees what they were told, not that a flag was raised. An adult moderated under
``SPARK_MODERATION=everyone`` raises none: no one supervises them.
"""

from __future__ import annotations

import logging

from shared.clock import Clock
from shared.errors import FamilyNotFound, NoFamily, SparkError
from shared.families.membership import NOT_YOURS
from shared.families.service import Families
from shared.ids import derived
from shared.schemas.documents import SafetyFlag, SafetyMirror
from shared.store.safety import SafetyStore

log = logging.getLogger(__name__)


class SafetyFlags:
    """Flags raised for dependents, and read by their parents."""

    def __init__(self, families: Families, store: SafetyStore, clock: Clock) -> None:
        self._families = families
        self._store = store
        self._clock = clock

    async def flag(
        self, member_id: str, category: str, direction: str, conversation_id: str, key: str
    ) -> None:
        """Tell ``member_id``'s parents (their family as stored now) of a stop in
        ``conversation_id``; ``key`` names the stop, so a retry adds no second flag. A
        failure is logged, not raised: the child's reply stands either way."""
        try:
            family = await self._families.current(member_id)
        except NoFamily:
            return
        except SparkError as exc:
            log.warning("a safety flag was not raised: %s (%s)", exc.code, exc.detail)
            return
        member = family.member(member_id)
        if member is None or member.role != "dependent":
            return
        flag = SafetyFlag(
            id=derived("flag", member_id, key),
            member_id=member_id,
            category=category,
            direction="input" if direction == "input" else "output",
            conversation_id=conversation_id,
            at=self._clock.now(),
        )
        try:
            await self._store.add([p.user_id for p in family.parents], flag)
        except SparkError as exc:
            log.warning("a safety flag was not recorded: %s (%s)", exc.code, exc.detail)

    async def read(self, user_id: str, family_id: str) -> SafetyMirror:
        """The flags of ``family_id`` as its parent ``user_id`` reads them.

        Raises:
            FamilyNotFound: it is not ``user_id``'s family, or they are not a parent in
                it (404, never 403: a dependent learns nothing of flags).
        """
        try:
            family = await self._families.current(user_id)
        except NoFamily:
            raise FamilyNotFound(NOT_YOURS) from None
        member = family.member(user_id)
        if family.id != family_id or member is None or member.role != "parent":
            raise FamilyNotFound(NOT_YOURS)
        return await self._store.get(user_id)
