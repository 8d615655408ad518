"""``Budget``: each user's daily allowances, kept in their ledger (``/{userId}/server``):
the tokens that provider calls spend, reserved before each call and settled after it
(``LedgerMeter``, the ``Meter`` the egress and task tools count with), live-audio
sessions and uploads.

Every change is one of the pure functions of ``allowance.py`` and ``voice_grants.py``,
run inside one ledger transaction (``Ledgers.mutate``): a reservation is one call into
the store, whose callback is the change built here. None of them changes a task's
status, so no task's section follows them.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from shared.budget import allowance, voice_grants
from shared.budget.allowance import UserLimits
from shared.budget.voice_grants import VoiceLimits
from shared.clock import Clock
from shared.errors import TaskCancelled
from shared.llm.base import Meter
from shared.schemas.server import Reservation, TaskLedger

log = logging.getLogger(__name__)

RESERVATION_LEASE = timedelta(minutes=10)
"""How long a provider call's reservation lasts unsettled before it is charged whole:
longer than any kind of call may take (``shared/egress/gate.BOUNDS``)."""

CANCELLED = "Cancelled by the user."


class Ledgers(Protocol):
    """What the budget needs of the ledger store (``shared/store/ledgers.TaskLedgerStore``
    is one): the budget sits below the store, whose run slots use its rules."""

    async def get(self, user_id: str) -> TaskLedger:
        """The ledger (empty if the user never had one)."""
        ...

    async def mutate(self, user_id: str, change: Callable[[TaskLedger], TaskLedger]) -> TaskLedger:
        """Apply ``change`` (pure, it may run more than once) in one transaction.

        Raises:
            What ``change`` raises (nothing is written).
            StoreError: the store failed.
        """
        ...


def cancel_wanted(ledger: TaskLedger, task_id: str) -> bool:
    """Its user asked the task to stop (``shared/tasks/ledger.request_cancel``): kept
    here, below the tasks package, as a task's reservation is refused on it."""
    record = ledger.tasks.get(task_id)
    return record is not None and record.status == "running" and bool(record.cancel_requested)


@dataclass
class Budget:
    """Today's tokens, voice sessions and uploads of each user, in their ledger."""

    ledger: Ledgers
    clock: Clock
    limits: UserLimits
    voice: VoiceLimits = field(default_factory=VoiceLimits)

    # -- tokens ----------------------------------------------------------------------------

    async def spend(self, user_id: str, tokens: int) -> None:
        """Count tokens spent outside a run (by task tools) against today's budget.

        Raises:
            StoreError: they were not counted.
        """
        now = self.clock.now()
        await self.ledger.mutate(user_id, lambda led: allowance.spend(led, now, tokens))

    async def check_tokens(self, user_id: str) -> None:
        """Refuse a model call once today's tokens are spent (on a fresh read).

        Raises:
            RateLimited: they are spent.
        """
        allowance.check_tokens(await self.ledger.get(user_id), self.clock.now(), self.limits)

    async def reserve(
        self, user_id: str, tokens: int, kind: str, task_id: str | None = None
    ) -> str:
        """Set ``tokens`` aside for one provider call (``allowance.reserve``), for as long
        as ``RESERVATION_LEASE``; its id. With ``task_id``, in the same write, refuse if
        its user cancelled that task.

        Raises:
            RateLimited: today's tokens are spent (nothing is reserved).
            TaskCancelled: the task's user asked it to stop.
        """
        now = self.clock.now()
        reservation_id = secrets.token_hex(8)
        held = Reservation(tokens=tokens, until=now + RESERVATION_LEASE, kind=kind)

        def change(ledger: TaskLedger) -> TaskLedger:
            if task_id is not None and cancel_wanted(ledger, task_id):
                raise TaskCancelled(CANCELLED)
            return allowance.reserve(ledger, reservation_id, held, now, self.limits)

        await self.ledger.mutate(user_id, change)
        return reservation_id

    async def settle(self, user_id: str, reservation_id: str, tokens: int) -> None:
        """Count what a reserved call used in place of its reservation (idempotent).

        Raises:
            StoreError: it was not counted (the reservation lapses, charged whole).
        """
        now = self.clock.now()
        await self.ledger.mutate(
            user_id, lambda led: allowance.settle(led, reservation_id, tokens, now)
        )

    def meter(self, user_id: str, task_id: str | None = None) -> Meter:
        """What one user's provider calls are checked and counted with (with ``task_id``,
        a task tool's: each check also stops the tool once its user cancelled it)."""
        return LedgerMeter(self, user_id, task_id)

    # -- live-audio sessions (``VoiceAllowance``) ------------------------------------------

    async def grant_voice(self, user_id: str, session_id: str, provider: str, model: str) -> None:
        """Count one more session today and record its grant (``voice_grants.grant_voice``)."""
        now = self.clock.now()
        await self.ledger.mutate(
            user_id,
            lambda led: voice_grants.grant_voice(led, session_id, provider, model, now, self.voice),
        )

    async def record_voice(
        self, user_id: str, session_id: str, secret_hash: str, expires_at: datetime
    ) -> None:
        """Keep the hash of the secret minted for the session."""
        await self.ledger.mutate(
            user_id,
            lambda led: voice_grants.record_voice(led, session_id, secret_hash, expires_at),
        )

    async def withdraw_voice(self, user_id: str, session_id: str) -> None:
        """Forget a grant whose secret was never minted, and give its count back."""
        now = self.clock.now()
        await self.ledger.mutate(
            user_id, lambda led: voice_grants.withdraw_voice(led, session_id, now)
        )

    # -- uploads (``UploadAllowance``) -----------------------------------------------------

    async def admit_upload(self, user_id: str) -> None:
        """Count one more upload session today (``allowance.admit_upload`` decides)."""
        now = self.clock.now()
        await self.ledger.mutate(user_id, lambda led: allowance.admit_upload(led, now, self.limits))

    async def withdraw_uploads(self, user_id: str, count: int) -> None:
        """Give back ``count`` of today's uploads."""
        now = self.clock.now()
        await self.ledger.mutate(user_id, lambda led: allowance.withdraw_uploads(led, now, count))


@dataclass(frozen=True, slots=True)
class LedgerMeter:
    """Reserves a provider call's tokens in the user's ledger and settles them; with
    ``task_id``, each reservation also stops the tool once its user cancelled the task."""

    budget: Budget
    user_id: str
    task_id: str | None = None

    async def reserve(self, tokens: int, kind: str) -> str:
        return await self.budget.reserve(self.user_id, tokens, kind, self.task_id)

    async def settle(self, reservation: str, tokens: int) -> None:
        try:
            await self.budget.settle(self.user_id, reservation, tokens)
        except Exception:
            # Unsettled, the reservation is charged whole when its lease ends.
            log.warning("%s: reservation %s not settled", self.user_id, reservation, exc_info=True)
