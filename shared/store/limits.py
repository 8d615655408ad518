"""Firestore's document size limit, checked before writing."""

from __future__ import annotations

from shared.errors import ConversationTooLarge

# Firestore's limit is 1 MiB (1,048,576 bytes), measured as ``patch.stored_size`` does;
# a little headroom covers a write that adds to a field we size approximately.
MAX_DOCUMENT_BYTES = 1_040_000


def check_size(size: int) -> None:
    """Raise ``ConversationTooLarge`` if a document of ``size`` bytes would not fit."""
    if size > MAX_DOCUMENT_BYTES:
        raise ConversationTooLarge(
            f"This conversation is too long to continue ({size} bytes); please start a new one."
        )
