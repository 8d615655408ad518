"""Where conversations are kept: the ``ConversationStore`` interface and its adapters."""

from shared.store.base import ConversationStore, Mutation
from shared.store.memory import InMemoryConversationStore

__all__ = ["ConversationStore", "InMemoryConversationStore", "Mutation"]
