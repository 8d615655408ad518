"""Parents' controls and consent (DESIGN §16): ``ParentalControls``, the verbs the api
and a send ask of them (the pure rules are ``shared/egress/controls.py``).

A parent sets, for each dependent of their family, which processors may receive the
child's data (the chat model's provider, speech, transcription, the moderator), quiet
hours and a daily limit of turns. The controls live in the family document
(``Family.controls``), so the read that finds a user's role finds them too: the egress
judges every call of a dependent on that fresh read (``refusal``), never on a copy.

A send is judged before the user's message is admitted (``ParentalControls.admit``):
a refused send changes nothing. Its turn is counted against ``dailyTurns`` in the
user's ``Membership``, in the transaction that reads the family's controls, so two
processes cannot both admit the last turn of the day.

A dependent whose parent withdrew consent for the moderator cannot have their turns
judged; where their turns would be judged (``SPARK_MODERATION`` is not ``off``), their
chat is refused too (reason ``consent``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from functools import partial

from shared.clock import Clock
from shared.egress.controls import DAILY, Processor, chat_processors, day_of, refusal
from shared.errors import FamilyNotFound, NoFamily, ParentControls
from shared.families.membership import NOT_YOURS, set_controls
from shared.families.service import Families, names_one
from shared.schemas.documents import Controls
from shared.store.base import FamilyStore, Household, Reads


def count_turn(
    household: Household,
    *,
    user_id: str,
    family_id: str,
    processors: tuple[Processor, ...],
    now: datetime,
) -> tuple[Household, None]:
    """One turn of ``user_id`` counted against their ``dailyTurns``, judged on the
    family's controls as this transaction read them.

    Raises:
        ParentControls: the controls forbid the turn (``consent``, ``quiet_hours``) or
            today's turns are used up (``daily_limit``); nothing is written.
    """
    family = household.family
    controls = None if family is None or family.id != family_id else family.controls_of(user_id)
    refused = refusal(controls, processors, now)
    if refused is not None:
        raise refused
    if controls is None or controls.daily_turns is None:
        return household, None
    mine = household.memberships[user_id]
    today = day_of(controls, now)
    used = mine.turns if mine.turns_day == today else 0
    if used >= controls.daily_turns:
        raise ParentControls(DAILY, "daily_limit")
    counted = mine.model_copy(update={"turns_day": today, "turns": used + 1})
    return replace(household, memberships={**household.memberships, user_id: counted}), None


class ParentalControls:
    """Setting a dependent's controls, and judging a dependent's send on them."""

    def __init__(
        self, families: Families, store: FamilyStore, clock: Clock, *, moderated: bool
    ) -> None:
        self._families = families
        self._store = store
        self._clock = clock
        self._moderated = moderated

    async def put(
        self, user_id: str, family_id: str, member_id: str, controls: Controls
    ) -> Controls:
        """``member_id``'s controls set by their parent ``user_id``, in the family and
        the dependent's mirror together.

        Raises:
            FamilyNotFound: not the caller's family, the caller is not a parent in it, or
                ``member_id`` is not a dependent of it (404: nothing is told).
        """
        if not names_one(family_id) or not names_one(member_id, user=True):
            raise FamilyNotFound(NOT_YOURS)
        stamped = controls.model_copy(
            update={"updated_at": self._clock.now(), "updated_by": user_id}
        )
        change = partial(set_controls, caller=user_id, target=member_id, controls=stamped)
        await self._store.apply(Reads(family_id=family_id), change)
        return stamped

    async def admit(self, user_id: str, *, voice: bool = False) -> bool:
        """Judge a send of ``user_id`` (with a clip to transcribe, ``voice``) before it is
        admitted: nothing is written when it is refused; its turn is counted when the
        controls set a daily limit. Whether ``user_id`` is a dependent.

        Raises:
            ParentControls: a control forbids it.
        """
        try:
            family = await self._families.current(user_id)
        except NoFamily:
            return False
        controls = family.controls_of(user_id)
        if controls is None:
            return False
        processors = chat_processors(moderated=self._moderated)
        if voice:
            processors = (*processors, "transcription")
        refused = refusal(controls, processors, self._clock.now())
        if refused is not None:
            raise refused
        if controls.daily_turns is None:
            return True
        change = partial(
            count_turn,
            user_id=user_id,
            family_id=family.id,
            processors=processors,
            now=self._clock.now(),
        )
        await self._store.apply(Reads(family_id=family.id, users=(user_id,)), change)
        return True
