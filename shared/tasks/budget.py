"""The user's daily tokens, kept in the ledger (``TokenBudget``): what runs and task
tools spend, reserved before each provider call and settled after it, and the ``Meter``
a task tool's model calls are checked and counted with. ``TaskScheduler`` is one.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from shared.clock import Clock
from shared.errors import TaskCancelled
from shared.llm.base import Meter
from shared.schemas.server import Reservation, TaskLedger
from shared.store.base import TaskLedgerStore
from shared.tasks import ledger as ledgers

log = logging.getLogger(__name__)

R = TypeVar("R")

RESERVATION_LEASE = timedelta(minutes=10)
"""How long a provider call's reservation lasts unsettled before it is charged whole:
longer than any kind of call may take (``shared/egress/gate.BOUNDS``)."""


class TokenBudget:
    """Today's tokens of each user, in the ledger."""

    ledger: TaskLedgerStore
    clock: Clock
    limits: ledgers.UserLimits

    async def _apply(self, user_id: str, change: Callable[[TaskLedger], tuple[TaskLedger, R]]) -> R:
        raise NotImplementedError  # the ledger's one way to change (``TaskScheduler``)

    async def spend(self, user_id: str, tokens: int) -> None:
        """Count tokens spent outside a run (by task tools) against today's budget.

        Raises:
            StoreError: they were not counted.
        """
        now = self.clock.now()
        await self._apply(user_id, lambda led: (ledgers.spend(led, now, tokens), None))

    async def check_tokens(self, user_id: str) -> None:
        """Refuse a model call once today's tokens are spent (on a fresh read).

        Raises:
            RateLimited: they are spent.
        """
        ledgers.check_tokens(await self.ledger.get(user_id), self.clock.now(), self.limits)

    async def reserve(
        self, user_id: str, tokens: int, kind: str, task_id: str | None = None
    ) -> str:
        """Set ``tokens`` aside for one provider call (``ledger.reserve``), for as long as
        ``RESERVATION_LEASE``; its id. With ``task_id``, in the same write, refuse if its
        user cancelled that task.

        Raises:
            RateLimited: today's tokens are spent (nothing is reserved).
            TaskCancelled: the task's user asked it to stop.
        """
        now = self.clock.now()
        reservation_id = secrets.token_hex(8)
        held = Reservation(tokens=tokens, until=now + RESERVATION_LEASE, kind=kind)

        def change(ledger: TaskLedger) -> tuple[TaskLedger, None]:
            if task_id is not None and ledgers.cancel_wanted(ledger, task_id):
                raise TaskCancelled("Cancelled by the user.")
            return ledgers.reserve(ledger, reservation_id, held, now, self.limits), None

        await self._apply(user_id, change)
        return reservation_id

    async def settle(self, user_id: str, reservation_id: str, tokens: int) -> None:
        """Count what a reserved call used in place of its reservation (idempotent).

        Raises:
            StoreError: it was not counted (the reservation lapses, charged whole).
        """
        now = self.clock.now()
        await self._apply(
            user_id, lambda led: (ledgers.settle(led, reservation_id, tokens, now), None)
        )

    async def check_task(self, user_id: str, task_id: str) -> None:
        """Before a task tool's next step, on one fresh read of the ledger: stop if its
        user cancelled it, and refuse a model call once today's tokens are spent.

        Raises:
            TaskCancelled: its user asked it to stop (``TaskPort.cancel_task``).
            RateLimited: today's tokens are spent.
        """
        ledger = await self.ledger.get(user_id)
        if ledgers.cancel_wanted(ledger, task_id):
            raise TaskCancelled("Cancelled by the user.")
        ledgers.check_tokens(ledger, self.clock.now(), self.limits)

    async def check_cancel(self, user_id: str, task_id: str) -> None:
        """``TaskPort.check_cancel``: a progress step's look at the ledger."""
        if ledgers.cancel_wanted(await self.ledger.get(user_id), task_id):
            raise TaskCancelled("Cancelled by the user.")

    def meter(self, user_id: str, task_id: str | None = None) -> Meter:
        """What a task tool's model calls are checked and counted with (with ``task_id``,
        each check also stops the tool once its user cancelled it)."""
        return LedgerMeter(self, user_id, task_id)


@dataclass(frozen=True, slots=True)
class LedgerMeter:
    """Reserves a provider call's tokens in the user's ledger and settles them; with
    ``task_id``, each reservation also stops the tool once its user cancelled the task."""

    scheduler: TokenBudget
    user_id: str
    task_id: str | None = None

    async def reserve(self, tokens: int, kind: str) -> str:
        return await self.scheduler.reserve(self.user_id, tokens, kind, self.task_id)

    async def settle(self, reservation: str, tokens: int) -> None:
        try:
            await self.scheduler.settle(self.user_id, reservation, tokens)
        except Exception:
            # Unsettled, the reservation is charged whole when its lease ends.
            log.warning("%s: reservation %s not settled", self.user_id, reservation, exc_info=True)
