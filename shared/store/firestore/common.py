"""What the Firestore stores share: the error a failed call becomes, and the
compare-and-set retry."""

from __future__ import annotations

import asyncio
import random
from contextlib import AbstractContextManager
from typing import Any

from google.cloud.firestore import DELETE_FIELD

from shared.store import failures

UNAVAILABLE = "Spark AI Agent could not reach its storage right now; please try again."
# A mutation that keeps losing the race is given up after this many attempts.
MAX_ATTEMPTS = 25


def unavailable(tried: str) -> AbstractContextManager[None]:
    """Inside, a failed Firestore call raises ``StoreError(UNAVAILABLE)``, its detail
    saying what was tried (``"Firestore read"``) and what Firestore said."""
    return failures.unavailable(UNAVAILABLE, lambda exc: f"{tried}: {exc.message}")


async def back_off(attempt: int, base: float = 0.005, cap: float = 0.2) -> None:
    """Wait before retrying a lost compare-and-set: a random share ("full jitter") of a
    delay that doubles from ``base`` (5 ms) up to ``cap`` (200 ms), so racing writers
    spread out."""
    await asyncio.sleep(random.uniform(0, min(cap, base * 2**attempt)))


def changed_fields(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The top-level fields to send: new or changed values, and deletions."""
    fields: dict[str, Any] = {k: v for k, v in after.items() if before.get(k, _MISSING) != v}
    fields.update({k: DELETE_FIELD for k in before.keys() - after.keys()})
    return fields


_MISSING = object()
