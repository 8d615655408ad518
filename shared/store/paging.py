"""Pages of ids, as the fakes give them: in id order (Firestore's order of document
ids is their bytes' order, which Python's ``str`` order keeps for the ids we make)."""

from __future__ import annotations

from collections.abc import Iterable


def page(ids: Iterable[str], after: str | None, limit: int) -> list[str]:
    """The first ``limit`` of ``ids``, sorted, that come after ``after`` (from the first:
    ``None``)."""
    return sorted(i for i in ids if after is None or i > after)[:limit]
