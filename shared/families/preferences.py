"""``Preferences``: each user's settings (DESIGN §8), and the one question the agent asks
of them: who, among some users, has turned off AI reading of their family messages.

The answer is always read from the store at the moment it is needed (never a copy kept
in memory): an opt-out must hold from the next model call on, in every process, also
for runs queued or waiting before it was made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from shared.clock import Clock
from shared.schemas.documents import UserSettings
from shared.store.base import SettingsStore


class Tombstones(Protocol):
    """Whose accounts are being erased, or were (``Erasures.erased``)."""

    async def erased(self, user_ids: Sequence[str]) -> frozenset[str]: ...


class Preferences:
    """Reading and changing users' settings; one per process."""

    def __init__(
        self, store: SettingsStore, clock: Clock, tombstones: Tombstones | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._tombstones = tombstones

    async def of(self, user_id: str) -> UserSettings:
        """The user's settings as stored now (the defaults if never changed)."""
        return (await self._store.get([user_id]))[user_id]

    async def update(self, user_id: str, *, ai_reads_family_messages: bool) -> UserSettings:
        """The user's settings with ``ai_reads_family_messages`` set, written to the truth
        and the user's mirror together.

        Raises:
            StoreError: nothing was written (or both were).
        """
        settings = UserSettings(
            ai_reads_family_messages=ai_reads_family_messages, updated_at=self._clock.now()
        )
        await self._store.put(user_id, settings)
        return settings

    async def opted_out(self, user_ids: Iterable[str]) -> frozenset[str]:
        """Those of ``user_ids`` who do not let any model read their family messages, as
        the store says now (one read of the settings for all of them). A member whose
        account is being erased, or was, counts as opted out (DESIGN §15): their settings
        are gone with it, their messages in the others' copies stay, and no model may
        be given them; read beside the settings, fresh too."""
        wanted = list(dict.fromkeys(user_ids))
        if not wanted:
            return frozenset()
        if self._tombstones is None:
            found, erased = await self._store.get(wanted), frozenset[str]()
        else:
            found, erased = await asyncio.gather(
                self._store.get(wanted), self._tombstones.erased(wanted)
            )
        chose = frozenset(uid for uid, s in found.items() if not s.ai_reads_family_messages)
        return chose | erased


def settings_violations(truth: dict[str, Any] | None, mirror: dict[str, Any] | None) -> list[str]:
    """What is wrong with one user's settings as stored: the mirror must say what the
    truth says (both are written in one batch), and each must be a valid document."""
    found: list[str] = []
    for name, document in (("truth", truth), ("mirror", mirror)):
        if document is not None:
            try:
                UserSettings.model_validate(document)
            except ValidationError as exc:
                found.append(f"the {name} is not valid settings: {exc.error_count()} error(s)")
    if truth != mirror:
        found.append(f"the mirror {mirror!r} differs from the truth {truth!r}")
    return found
