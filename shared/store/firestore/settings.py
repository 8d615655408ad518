"""Users' settings on Firestore: the truth and the mirror written in one batch."""

from __future__ import annotations

from collections.abc import Sequence

from google.cloud.firestore import AsyncClient

from shared.schemas.documents import UserSettings
from shared.store.firestore.common import unavailable
from shared.store.settings import settings_mirror_path, settings_path


class FirestoreSettingsStore:
    """``SettingsStore`` on Firestore. ``get`` reads the truth of several users in one
    round trip (``get_all``): a model call that screens family messages reads every
    author's settings at once."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def get(self, user_ids: Sequence[str]) -> dict[str, UserSettings]:
        wanted = list(dict.fromkeys(user_ids))
        found: dict[str, UserSettings] = {uid: UserSettings() for uid in wanted}
        if not wanted:
            return found
        refs = [self._client.document(*settings_path(uid)) for uid in wanted]
        by_path = {ref.path: uid for ref, uid in zip(refs, wanted, strict=True)}
        with unavailable("Firestore read of settings"):
            async for snapshot in self._client.get_all(refs):
                if snapshot.exists:
                    uid = by_path[snapshot.reference.path]
                    found[uid] = UserSettings.model_validate(snapshot.to_dict() or {})
        return found

    async def put(self, user_id: str, settings: UserSettings) -> None:
        document = settings.to_firestore()
        batch = self._client.batch()
        batch.set(self._client.document(*settings_path(user_id)), document)
        batch.set(self._client.document(*settings_mirror_path(user_id)), document)
        with unavailable("Firestore write of settings"):
            await batch.commit()
