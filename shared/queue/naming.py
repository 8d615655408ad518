"""Deterministic names: the same work always gets the same id, so redeliveries and
retries find what an earlier delivery did instead of doing it again."""

from __future__ import annotations


def attempt_name(task_id: str, attempt: int) -> str:
    """The Cloud Task of one attempt (Cloud Tasks keeps names for a while after use,
    so each attempt needs its own)."""
    return f"{task_id}-{attempt}"


def reply_name(run_id: str, after: str | None = None) -> str:
    """The task that produces a queued run; ``after``: again, once the run ``after``
    freed a slot it waited for (a name of its own: the first was used)."""
    return f"reply-{run_id}" if after is None else f"reply-{run_id}-after-{after}"


def watchdog_name(run_id: str, lease_until: float) -> str:
    """The check of a run due when its lease (``lease_until``, epoch seconds) lapses."""
    return f"watch-{run_id}-{int(lease_until)}"


def expire_name(task_id: str) -> str:
    return f"expire-{task_id}"


def follow_up_name(message_id: str, attempt: int) -> str:
    return f"follow-{message_id}-{attempt}"


def erase_name(deletion_id: str, step: int) -> str:
    """The task that takes an erasure on from its record's version ``step``."""
    return f"erase-{deletion_id}-{step}"


def retention_name(cutoff: float, page: int) -> str:
    """A page of the retention sweep of the conversations untouched since ``cutoff``
    (epoch seconds): a redelivered page enqueues the same next page."""
    return f"retention-{int(cutoff)}-{page}"
