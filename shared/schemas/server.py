"""Server-only documents (rules deny clients): the per-user task ledger.

``/{userId}/server`` holds every task of one user, so admitting a task against the
per-user limit and releasing its slot are single-document compare-and-set writes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.schemas.documents import Document, TaskStatus, Timestamp


class TaskRecord(Document):
    """One long-running tool call, from queued to finished.

    ``attempt`` counts the deliveries granted so far; each has its own Cloud Task,
    and only a handler for the current attempt may run the tool. ``started`` says a
    handler has claimed the current attempt; its lease must be renewed while it runs.
    """

    task_id: str
    kind: Literal["tool"] = "tool"
    conversation_id: str
    tool_call_id: str
    tool: str
    display_text: str
    seq: int
    status: TaskStatus
    attempt: int = 0
    started: bool = False
    lease_expires_at: Timestamp | None = None
    retry_at: Timestamp | None = None
    error: str | None = None
    created_at: Timestamp
    updated_at: Timestamp


class RunSlot(Document):
    """A conversation of the user's with a reply being written, holding one of their
    slots until that run ends (or ``until``).

    ``joined`` are later runs of the same conversation admitted while ``run_id`` still
    held the slot (a follow-up opened as the run before it ends, a send about to lose
    its race for the conversation): each frees only itself, and the slot is free once
    none is left, so the run that ends last, not first, gives it back.
    """

    run_id: str
    until: Timestamp
    joined: list[str] = Field(default_factory=list)

    @property
    def members(self) -> list[str]:
        return [self.run_id, *self.joined]


class WaitingRun(Document):
    """A queued run refused a slot: it is handed to a task again when a slot frees.
    ``tries`` counts its refusals: each one is a write, so it is judged on the ledger as
    stored, never on a copy a process remembers."""

    run_id: str
    since: Timestamp
    tries: int = Field(default=1, ge=1)


class DailyUsage(Document):
    """Tokens the provider reported for this user's replies on ``day`` (UTC), and the
    upload sessions they started."""

    day: str
    tokens: int = Field(default=0, ge=0)
    uploads: int = Field(default=0, ge=0)


class TaskLedger(Document):
    """``/{userId}/server``: the user's tasks (live ones and the latest finished ones),
    the runs they have going, and today's token usage: one document, so every per-user
    limit is checked and taken in one compare-and-set write."""

    next_seq: int = 0
    tasks: dict[str, TaskRecord] = Field(default_factory=dict)
    runs: dict[str, RunSlot] = Field(default_factory=dict)  # by conversation id
    waiting: dict[str, WaitingRun] = Field(default_factory=dict)  # by conversation id
    usage: DailyUsage | None = None
