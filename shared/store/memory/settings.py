"""Users' settings in memory."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from shared.schemas.documents import (
    UserSettings,
)
from shared.store.settings import settings_mirror_path, settings_path


class InMemorySettingsStore:
    """Users' settings as documents by path (``documents``: the truth and the mirror, as
    Firestore holds them); ``reads`` counts the reads, so tests see that a decision
    looked at the store rather than a copy in memory."""

    def __init__(self) -> None:
        self.documents: dict[tuple[str, ...], dict[str, Any]] = {}
        self.reads = 0

    async def get(self, user_ids: Sequence[str]) -> dict[str, UserSettings]:
        self.reads += 1
        return {
            uid: UserSettings.model_validate(self.documents.get(settings_path(uid)) or {})
            for uid in dict.fromkeys(user_ids)
        }

    async def put(self, user_id: str, settings: UserSettings) -> None:
        document = settings.to_firestore()
        self.documents[settings_path(user_id)] = copy.deepcopy(document)
        self.documents[settings_mirror_path(user_id)] = copy.deepcopy(document)
