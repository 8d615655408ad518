"""The task queue interface (Cloud Tasks in production, its emulator locally)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class QueuedTask:
    """One HTTP call to the ``tasks`` function.

    ``name`` is deterministic (derived from what the task does), so a queue that
    de-duplicates names (Cloud Tasks) drops a second enqueue of the same work; the
    handler is idempotent anyway, since the emulator does not de-duplicate.
    """

    name: str
    body: bytes
    schedule_at: datetime | None = None


class TaskQueue(Protocol):
    async def enqueue(self, task: QueuedTask) -> None:
        """Hand ``task`` to the queue; a task with this name already queued is not an error.

        Raises:
            QueueUnavailable: the queue did not take it.
        """
        ...


SIGNATURE_HEADER = "X-Spark-Task-Signature"
TASK_NAME_HEADER = "X-CloudTasks-TaskName"
# A local signature older than this (from its task's due time) is refused as a replay.
SIGNATURE_MAX_AGE_SECONDS = 900


def sign(key: str, body: bytes, name: str, at: int) -> str:
    """The local-mode signature of a task (HMAC-SHA256 over its due time, its name and
    its body): the emulator sends no OIDC token, so locally this is how the ``tasks``
    function knows a call is ours, meant for this task, and recent."""
    digest = hmac.new(key.encode(), f"{at}.{name}.".encode() + body, hashlib.sha256)
    return f"t={at},v1={digest.hexdigest()}"
