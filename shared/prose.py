"""Small helpers for the UK English the product writes to people."""

from __future__ import annotations

from collections.abc import Sequence


def listed(items: Sequence[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``: no Oxford comma, as UK house style
    writes lists (an error's fields, a user's attachments, a busy port's names)."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
