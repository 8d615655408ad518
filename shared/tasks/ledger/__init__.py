"""A user's ledger (``/{userId}/server``), changed by pure functions that run inside
``TaskLedgerStore.mutate``: here, its tasks' (``tasks``: admission, claims, leases,
retries, release), imported from here (the scheduler reads them as ``ledgers.<name>``).
Its allowances (runs at once, tokens, uploads, voice sessions) are the budget's
(``shared/budget``), as is ``cancel_wanted``, which a task's reservation is refused on.
"""

from __future__ import annotations

from shared.budget.service import cancel_wanted
from shared.tasks.ledger.tasks import (
    FINISHED,
    Claim,
    LedgerPolicy,
    abandon,
    cancel,
    cancellable,
    claim,
    finish,
    forget,
    grant,
    holds,
    renew,
    request_cancel,
    reschedule,
    submit,
    wait,
)

__all__ = [
    "FINISHED",
    "Claim",
    "LedgerPolicy",
    "abandon",
    "cancel",
    "cancel_wanted",
    "cancellable",
    "claim",
    "finish",
    "forget",
    "grant",
    "holds",
    "renew",
    "request_cancel",
    "reschedule",
    "submit",
    "wait",
]
