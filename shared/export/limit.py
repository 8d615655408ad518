"""At most one export of a person's data per ``EVERY``: a pure change to their ledger
(``/{uid}/server``), so the verdict is the store's compare-and-set, whichever process
asks; two processes asked at once cannot both start one."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from shared.errors import RateLimited
from shared.schemas.server import TaskLedger

EVERY = timedelta(minutes=10)


def claim(ledger: TaskLedger, now: datetime, every: timedelta = EVERY) -> TaskLedger:
    """Record an export starting ``now``.

    Raises:
        RateLimited: one started less than ``every`` ago; nothing is written.
    """
    last = ledger.exported_at
    if last is not None and now < last + every:
        wait = math.ceil((last + every - now).total_seconds())
        minutes = round(every.total_seconds() / 60)
        raise RateLimited(
            f"An export of this account was started in the last {minutes} minutes; "
            f"you can start another in {wait} seconds.",
            wait,
            limit="exports",
        )
    return ledger.model_copy(update={"exported_at": now})


def release(ledger: TaskLedger, started: datetime) -> TaskLedger:
    """Forget the export that started at ``started`` (it failed on our side, so the
    person may try again at once); unchanged if another has been recorded since."""
    if ledger.exported_at != started:
        return ledger
    return ledger.model_copy(update={"exported_at": None})
