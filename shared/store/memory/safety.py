"""Parents' safety mirrors in memory."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from shared.schemas.documents import SafetyFlag, SafetyMirror
from shared.store.safety import safety_path, with_flag


class InMemorySafetyStore:
    """The mirrors as documents by path, as Firestore holds them."""

    def __init__(self) -> None:
        self.documents: dict[tuple[str, ...], dict[str, Any]] = {}

    async def add(self, parent_ids: Sequence[str], flag: SafetyFlag) -> None:
        for parent in dict.fromkeys(parent_ids):
            mirror = with_flag(await self.get(parent), flag, flag.at)
            self.documents[safety_path(parent)] = copy.deepcopy(mirror.to_firestore())

    async def get(self, user_id: str) -> SafetyMirror:
        return SafetyMirror.model_validate(self.documents.get(safety_path(user_id)) or {})
