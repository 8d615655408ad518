"""Where a user's settings live (DESIGN §8): the truth only the functions read, and the
mirror the user's client reads; ``PATCH /api/spark/me/settings`` writes both together."""

from __future__ import annotations

Path = tuple[str, ...]


def settings_path(user_id: str) -> Path:
    """The truth, server-only."""
    return (user_id, "server", "settings", "current")


def settings_mirror_path(user_id: str) -> Path:
    """What the user reads (``schemas/settings.schema.json``)."""
    return (user_id, "client", "settings", "current")
