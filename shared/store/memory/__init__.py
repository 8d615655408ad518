"""In-memory stores for unit tests and offline runs (documents kept as Firestore would:
serialised dicts, so what is read back went through the same validation), one module
per store as on Firestore (``shared/store/firestore/``)."""

from shared.store.memory.conversations import InMemoryConversationStore
from shared.store.memory.families import InMemoryFamilyStore, InMemoryPostStore, posts_beside
from shared.store.memory.ledgers import (
    InMemoryOpeningStore,
    InMemoryTaskDocumentStore,
    InMemoryTaskLedgerStore,
    openings_beside,
    sections_beside,
)
from shared.store.memory.lessons import InMemoryLessonStore
from shared.store.memory.settings import InMemorySettingsStore

__all__ = [
    "InMemoryConversationStore",
    "InMemoryFamilyStore",
    "InMemoryLessonStore",
    "InMemoryOpeningStore",
    "InMemoryPostStore",
    "InMemorySettingsStore",
    "InMemoryTaskDocumentStore",
    "InMemoryTaskLedgerStore",
    "openings_beside",
    "posts_beside",
    "sections_beside",
]
