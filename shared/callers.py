"""Who may call the functions, as the settings say: the api's callers (a Firebase ID
token, and App Check), and the tasks function's (Cloud Tasks' OIDC token in production,
a local signature or nobody elsewhere). The composition root (``functions/main.py``)
builds them beside the components (``shared/wiring.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.auth.base import TokenVerifier
from shared.auth.tasks import LocalTaskVerifier, RefuseAllTaskCalls, TaskCallerVerifier
from shared.config import Settings

if TYPE_CHECKING:
    from shared.appcheck.guard import AppCheck
    from shared.store.firestore import FirestoreStores


def build_verifier(settings: Settings) -> TokenVerifier:
    from shared.auth.firebase import FirebaseTokenVerifier

    return FirebaseTokenVerifier(
        settings.project_id,
        check_revoked=settings.check_revoked,
        emulated=bool(settings.auth_emulator_host),
    )


def build_app_check(settings: Settings, stores: FirestoreStores) -> AppCheck:
    """App Check as ``SPARK_APP_CHECK`` asks, its spent tokens recorded in Firestore.

    Raises:
        ConfigurationError: an unknown mode, or one that checks without the project's
            number: the process refuses to start.
    """
    from shared.appcheck.guard import app_check
    from shared.store.firestore.appcheck import FirestoreSpentTokens

    return app_check(settings, FirestoreSpentTokens(stores.client))


def build_task_verifier(settings: Settings) -> TaskCallerVerifier:
    """OIDC in production; the local signature (or nothing at all) elsewhere."""
    if settings.in_production:
        from shared.auth.oidc import OidcTaskVerifier

        assert settings.tasks_service_account is not None  # Settings.check insists
        return OidcTaskVerifier(settings.tasks_url, settings.tasks_service_account)
    if settings.tasks_local_key:
        return LocalTaskVerifier(settings.tasks_local_key)
    return RefuseAllTaskCalls()
