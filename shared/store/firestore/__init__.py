"""The stores on Cloud Firestore (the only package that imports it): conversations,
task ledgers, lessons, families, task sections, family messages' posts, users'
settings, a send's admission with its message (openings) and accounts' erasures, all
on one client per process (``connect``)."""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud.firestore import AsyncClient, Client

from shared.config import DEFAULT_LESSON_VERSIONS_KEPT
from shared.store.firestore.accounts import FirestoreAccountStore
from shared.store.firestore.conversations import FirestoreConversationStore
from shared.store.firestore.families import FirestoreFamilyStore
from shared.store.firestore.feedback import FirestoreFeedbackStore
from shared.store.firestore.ledgers import FirestoreTaskLedgerStore
from shared.store.firestore.lessons import FirestoreLessonStore
from shared.store.firestore.openings import FirestoreOpeningStore
from shared.store.firestore.posts import FirestorePostStore
from shared.store.firestore.provenance import FirestoreProvenanceStore
from shared.store.firestore.safety import FirestoreSafetyStore
from shared.store.firestore.settings import FirestoreSettingsStore
from shared.store.firestore.tasks import FirestoreTaskDocumentStore

__all__ = [
    "FirestoreAccountStore",
    "FirestoreConversationStore",
    "FirestoreFamilyStore",
    "FirestoreFeedbackStore",
    "FirestoreLessonStore",
    "FirestoreOpeningStore",
    "FirestorePostStore",
    "FirestoreSafetyStore",
    "FirestoreSettingsStore",
    "FirestoreStores",
    "FirestoreTaskDocumentStore",
    "FirestoreTaskLedgerStore",
    "connect",
]


@dataclass(frozen=True)
class FirestoreStores:
    """Every store of one process, sharing one async client (and, once something
    listens, one sync client: the async client has no listeners)."""

    client: AsyncClient
    conversations: FirestoreConversationStore
    ledgers: FirestoreTaskLedgerStore
    lessons: FirestoreLessonStore
    families: FirestoreFamilyStore
    sections: FirestoreTaskDocumentStore
    posts: FirestorePostStore
    settings: FirestoreSettingsStore
    openings: FirestoreOpeningStore
    provenance: FirestoreProvenanceStore
    accounts: FirestoreAccountStore
    safety: FirestoreSafetyStore
    feedback: FirestoreFeedbackStore

    def close(self) -> None:
        self.conversations.close()
        self.client.close()  # type: ignore[no-untyped-call]


def connect(
    project_id: str, lesson_versions_kept: int = DEFAULT_LESSON_VERSIONS_KEPT
) -> FirestoreStores:
    """The stores on the project's default database (the emulator if its variable is set)."""
    client = AsyncClient(project=project_id)
    conversations = FirestoreConversationStore(client, lambda: Client(project=project_id))
    ledgers = FirestoreTaskLedgerStore(client)
    return FirestoreStores(
        client,
        conversations,
        ledgers,
        FirestoreLessonStore(client, lesson_versions_kept),
        FirestoreFamilyStore(client),
        FirestoreTaskDocumentStore(client),
        FirestorePostStore(client),
        FirestoreSettingsStore(client),
        FirestoreOpeningStore(client, conversations, ledgers),
        FirestoreProvenanceStore(client),
        FirestoreAccountStore(client),
        FirestoreSafetyStore(client),
        FirestoreFeedbackStore(client),
    )
