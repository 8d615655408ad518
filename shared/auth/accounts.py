"""Sign-in accounts as Firebase Auth keeps them: the last thing an erasure deletes
(DESIGN §15). ``FirebaseAccounts`` is the adapter (firebase-admin's ``delete_user``; the
Auth emulator when ``FIREBASE_AUTH_EMULATOR_HOST`` is set, as firebase-admin reads it),
``InMemoryAccounts`` the fake."""

from __future__ import annotations

import asyncio
from typing import Protocol

from shared.errors import AuthUnavailable

UNAVAILABLE = "Spark AI Agent could not reach its sign-in service right now; please try again."


class Accounts(Protocol):
    """The sign-in accounts of users."""

    async def delete(self, user_id: str) -> bool:
        """Delete the user's account (its sessions end: their ID tokens can no longer be
        refreshed); ``False`` when there was none (deleted already: no error).

        Raises:
            AuthUnavailable: the Auth backend could not be reached (nothing changed).
        """
        ...


class InMemoryAccounts:
    """Accounts in a set, for unit tests and offline runs; ``failing`` makes every call
    fail as an unreachable backend."""

    def __init__(self, user_ids: set[str] | None = None) -> None:
        self.user_ids = set(user_ids or ())
        self.deleted: list[str] = []
        self.failing = False

    async def delete(self, user_id: str) -> bool:
        if self.failing:
            raise AuthUnavailable(UNAVAILABLE)
        if user_id not in self.user_ids:
            return False
        self.user_ids.discard(user_id)
        self.deleted.append(user_id)
        return True


class FirebaseAccounts:
    """``Accounts`` on Firebase Auth through firebase-admin (blocking: each call in a
    worker thread; the SDK imported on first use, as ``shared/auth/firebase.py`` does)."""

    def __init__(self, project_id: str) -> None:
        self._project_id = project_id
        self._app: object | None = None

    def _delete(self, user_id: str) -> bool:
        import firebase_admin
        from firebase_admin import auth

        if self._app is None:
            name = f"spark-accounts-{self._project_id}"
            try:
                self._app = firebase_admin.get_app(name)
            except ValueError:
                options = {"projectId": self._project_id}
                self._app = firebase_admin.initialize_app(options=options, name=name)
        try:
            auth.delete_user(user_id, app=self._app)
        except auth.UserNotFoundError:
            return False
        except firebase_admin.exceptions.FirebaseError as exc:
            raise AuthUnavailable(UNAVAILABLE, detail=str(exc)) from exc
        return True

    async def delete(self, user_id: str) -> bool:
        return await asyncio.to_thread(self._delete, user_id)
