"""Across users: every member's copy of a shared (``direct`` or ``family``) conversation
holds each message once, identical in each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from shared.audit.violations import UserDocuments, Violation, conversation_path

SHARED_KINDS = ("direct", "family")


def _stored_messages(documents: UserDocuments, conversation_id: str) -> list[Mapping[str, Any]]:
    """A conversation's messages as stored: the archive segments its marker counts,
    then the live ones."""
    live = documents.conversations[conversation_id]
    marker = live.get("archived") or {}
    counted = int(marker.get("segments", 0)) if isinstance(marker, Mapping) else 0
    segments = list(documents.archives.get(conversation_id, []))[:counted]
    archived = [m for s in segments for m in s.get("messages", [])]
    return [*archived, *live.get("messages", [])]


def shared_copies(users: Iterable[UserDocuments]) -> list[Violation]:
    """Every message of a ``direct`` or ``family`` conversation is identical in each
    member's copy that holds it (compared field for field, as stored), and held once
    in each; a copy whose other copies were not read is compared with none."""
    seen: dict[tuple[str, str], tuple[str, Mapping[str, Any]]] = {}
    found: list[Violation] = []
    for documents in users:
        uid = documents.user_id
        for conversation_id, live in documents.conversations.items():
            if live.get("kind") not in SHARED_KINDS:
                continue
            path = conversation_path(uid, conversation_id)
            ids: Counter[str] = Counter()
            for message in _stored_messages(documents, conversation_id):
                message_id = str(message.get("id"))
                ids[message_id] += 1
                first = seen.setdefault((conversation_id, message_id), (uid, message))
                if first[1] != message:
                    found.append(
                        Violation(
                            "shared_copy",
                            uid,
                            path,
                            f"message {message_id} differs from {first[0]}'s copy",
                        )
                    )
            for message_id, count in ids.items():
                if count > 1:
                    found.append(
                        Violation(
                            "shared_copy", uid, path, f"message {message_id} is held {count} times"
                        )
                    )
    return found
