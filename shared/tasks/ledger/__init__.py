"""A user's ledger (``/{userId}/server``), changed by pure functions that run inside
``TaskLedgerStore.mutate``: ``tasks`` (admission, claims, leases, retries, release),
and, from the store's modules (a run's slot is taken and freed below the agent, by
``shared/store/slots.py``), ``allowance`` (runs at once, the daily token budget and
its reservations, uploads) and ``voice_grants`` (live-audio sessions). Every function
is imported from here (the scheduler reads them as ``ledgers.<name>``).
"""

from __future__ import annotations

from shared.store.allowance import (
    SLOT_RETRY_SECONDS,
    SPENT,
    UserLimits,
    admit_run,
    admit_upload,
    check_tokens,
    release_run,
    reserve,
    settle,
    spend,
    until_midnight,
    usage_today,
    withdraw_uploads,
)
from shared.store.voice_grants import (
    VOICE_KEPT,
    VoiceLimits,
    grant_voice,
    record_voice,
    redeem_voice,
    withdraw_voice,
)
from shared.tasks.ledger.tasks import (
    FINISHED,
    Claim,
    LedgerPolicy,
    abandon,
    cancel,
    cancel_wanted,
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
    "SLOT_RETRY_SECONDS",
    "SPENT",
    "VOICE_KEPT",
    "Claim",
    "LedgerPolicy",
    "UserLimits",
    "VoiceLimits",
    "abandon",
    "admit_run",
    "admit_upload",
    "cancel",
    "cancel_wanted",
    "cancellable",
    "check_tokens",
    "claim",
    "finish",
    "forget",
    "grant",
    "grant_voice",
    "holds",
    "record_voice",
    "redeem_voice",
    "release_run",
    "renew",
    "request_cancel",
    "reschedule",
    "reserve",
    "settle",
    "spend",
    "submit",
    "until_midnight",
    "usage_today",
    "wait",
    "withdraw_uploads",
    "withdraw_voice",
]
