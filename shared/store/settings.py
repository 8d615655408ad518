"""Where a user's settings live (DESIGN §8): the truth only the functions read, and the
mirror the user's client reads; ``PATCH /api/spark/me/settings`` writes both together
(``SettingsStore``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shared.schemas.documents import UserSettings

Path = tuple[str, ...]


def settings_path(user_id: str) -> Path:
    """The truth, server-only."""
    return (user_id, "server", "settings", "current")


def settings_mirror_path(user_id: str) -> Path:
    """What the user reads (``schemas/settings.schema.json``)."""
    return (user_id, "client", "settings", "current")


class SettingsStore(Protocol):
    """Each user's settings: the truth at ``/{uid}/server/settings/current`` and the
    mirror the user reads at ``/{uid}/client/settings/current``
    (``shared/store/settings.py`` names both)."""

    async def get(self, user_ids: Sequence[str]) -> dict[str, UserSettings]:
        """The settings of each of ``user_ids`` as stored now (the defaults for a user who
        never changed them), read together.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def put(self, user_id: str, settings: UserSettings) -> None:
        """Write ``settings`` as the user's truth and mirror, both or neither.

        Raises:
            StoreError: the store failed.
        """
        ...
