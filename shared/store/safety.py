"""Where the moderator's flags live (DESIGN §16): in each parent's own subtree, the only
place they are read (``/{uid}/client/family/safety``, newest ``MAX_FLAGS``), written
for every parent of the family in one transaction (``SafetyStore``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from shared.schemas.documents import MAX_FLAGS, SafetyFlag, SafetyMirror

Path = tuple[str, ...]


def safety_path(user_id: str) -> Path:
    """A parent's safety mirror (``schemas/safety.schema.json``)."""
    return (user_id, "client", "family", "safety")


def with_flag(mirror: SafetyMirror, flag: SafetyFlag, now: datetime) -> SafetyMirror:
    """``mirror`` with ``flag`` first, the oldest past ``MAX_FLAGS`` gone (each flag
    once: a retried write adds nothing)."""
    kept = [f for f in mirror.flags if f.id != flag.id]
    return SafetyMirror(flags=[flag, *kept][:MAX_FLAGS], updated_at=now)


class SafetyStore(Protocol):
    """Parents' safety mirrors."""

    async def add(self, parent_ids: Sequence[str], flag: SafetyFlag) -> None:
        """Put ``flag`` in each of ``parent_ids``' mirrors, all or none (``with_flag``).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def get(self, user_id: str) -> SafetyMirror:
        """``user_id``'s mirror as stored now (empty when they have none).

        Raises:
            StoreError: the store failed.
        """
        ...
