"""The invariants of a user's stored state: what must hold across every process, checked
on the documents alone (pure; ``tools/audit.py`` reads them from Firestore).

Three tiers, because a live system is legitimately between steps:

* **always**: true after every completed write, whatever is still queued (a call shown
  as handed to a task has its live ledger record, every call has at most one result,
  a finished call has its result, no queue without a run, no document over budget, no
  more replies streaming at once than the user's limit);
* **in time** (``Audit.now``): nothing still streaming or running past its lease plus
  the watchdog's grace;
* **settled** (``Audit.settled``): once every due task has been delivered, nothing
  waits: every live ledger task belongs to a call that waits for it, every handed-off
  call has its result, every step whose results are in has its follow-up, and no run
  slot is still held.

A violation names the document (``path``) and says what is wrong (``detail``).

``violations``: what is read and what is found; ``checker``: the checks of one user;
``copies``: the checks across users of their shared conversations.
"""

from __future__ import annotations

from shared.audit.checker import audit
from shared.audit.copies import shared_copies
from shared.audit.violations import (
    Audit,
    Kind,
    UserDocuments,
    Violation,
    conversation_path,
    grouped,
    ledger_path,
    pending,
    task_path,
)

__all__ = [
    "Audit",
    "Kind",
    "UserDocuments",
    "Violation",
    "audit",
    "conversation_path",
    "grouped",
    "ledger_path",
    "pending",
    "shared_copies",
    "task_path",
]
