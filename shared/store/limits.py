"""Firestore's document size limit, checked before writing."""

from __future__ import annotations

import json
from typing import Any

from shared.errors import ConversationTooLarge

# Firestore's limit is 1 MiB; keep headroom for field-name overhead and index entries.
MAX_DOCUMENT_BYTES = 1_000_000


def check_size(document: dict[str, Any]) -> None:
    """Raise ``ConversationTooLarge`` if ``document`` would not fit in Firestore."""
    size = len(json.dumps(document, default=str, separators=(",", ":")).encode("utf-8"))
    if size > MAX_DOCUMENT_BYTES:
        raise ConversationTooLarge(
            f"This conversation is too long to continue ({size} bytes); please start a new one."
        )
