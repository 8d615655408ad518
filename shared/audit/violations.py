"""What an audit reads (a user's documents as stored), what it is asked to check, and
what it finds: ``Violation``s, and the work still going on (``pending``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from shared.config import Settings

Kind = Literal[
    "invalid_document",
    "stale_run",
    "stale_task",
    "call_without_task",
    "task_without_call",
    "task_entry_without_call",
    "call_results",
    "call_status",
    "missing_follow_up",
    "stuck_queue",
    "oversize",
    "over_run_limit",
    # A family's members each read one mirror that matches it (shared/families/audit.py).
    "family_mirror",
    # Every copy of a message between family members is the same in each subtree.
    "shared_copy",
    # A user's settings mirror says what the server-only truth says (preferences.py).
    "settings_mirror",
    # A user's lesson progress summary says what their lessons say (lessons/progress.py).
    "lesson_progress",
    # Seen by the stateful test, which watches calls and deliveries (documents cannot
    # say): a model call that began once the user's tokens for the day were spent, and
    # a task delivery acknowledged while its attempt had not started (it was dropped).
    "over_budget",
    "dropped_task",
    "leaked_slot",
    "unsettled",
    "section_disagrees",
    # A user's message with no words: a voice clip is refused when nothing is heard.
    "blank_user_message",
]


# A task in these states has not ended (one waiting on its user holds no slot, and waits
# for a person, not for work: ``pending`` does not count it).
LIVE = ("queued", "running", "waiting_on_user")


WORKING = ("queued", "running")


# Calls in these states were handed to a task (a task tool, or an approved call).
HANDED = ("queued", "running")


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: ``kind``, whose, which document, and what is wrong."""

    kind: Kind
    user_id: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Audit:
    """What to check. ``now`` enables the lease checks (a run or task past its lease plus
    ``grace``); ``settled`` the checks that hold only once every due task was delivered."""

    grace: timedelta
    live_doc_bytes: int
    runs_per_user: int
    history_messages: int = 20
    now: datetime | None = None
    settled: bool = False

    @classmethod
    def of(cls, settings: Settings, now: datetime | None = None, settled: bool = False) -> Audit:
        return cls(
            grace=timedelta(seconds=settings.watchdog_grace_seconds),
            live_doc_bytes=settings.live_doc_bytes,
            runs_per_user=settings.runs_per_user,
            history_messages=settings.history_messages,
            now=now,
            settled=settled,
        )


@dataclass(frozen=True, slots=True)
class UserDocuments:
    """A user's documents as stored (camelCase dicts, as Firestore returns them): the
    ledger (``/{uid}/server``, ``None`` if absent), conversations by id, and each
    conversation's archive segments, and the task sections by task id (``None``: not
    read, so not checked)."""

    user_id: str
    ledger: Mapping[str, Any] | None = None
    conversations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    archives: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    tasks: Mapping[str, Mapping[str, Any]] | None = None


def ledger_path(user_id: str) -> str:
    return f"/{user_id}/server"


def task_path(user_id: str, task_id: str) -> str:
    return f"/{user_id}/client/tasks/{task_id}"


def conversation_path(user_id: str, conversation_id: str) -> str:
    return f"/{user_id}/client/conversations/{conversation_id}"


def pending(documents: UserDocuments) -> list[Violation]:
    """Work still going on (runs active, ledger tasks live), as ``unsettled`` violations:
    an empty list means the user's documents have settled."""
    uid, found = documents.user_id, []
    for conversation_id, raw in documents.conversations.items():
        run = raw.get("activeRun")
        if isinstance(run, Mapping):
            found.append(
                Violation(
                    "unsettled",
                    uid,
                    conversation_path(uid, conversation_id),
                    f"run {run.get('runId')} is still {run.get('status')}",
                )
            )
    tasks = (documents.ledger or {}).get("tasks") or {}
    for task_id, record in tasks.items():
        if isinstance(record, Mapping) and record.get("status") in WORKING:
            found.append(
                Violation(
                    "unsettled",
                    uid,
                    ledger_path(uid),
                    f"task {task_id} ({record.get('tool')}) is still {record.get('status')}",
                )
            )
    return found


def grouped(violations: Iterable[Violation]) -> dict[str, list[Violation]]:
    """Violations by kind, kinds in alphabetical order."""
    by_kind: dict[str, list[Violation]] = {}
    for violation in sorted(violations, key=lambda v: (v.kind, v.user_id, v.path)):
        by_kind.setdefault(violation.kind, []).append(violation)
    return by_kind
