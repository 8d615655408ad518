"""What the Firestore stores share: the error a failed call becomes, the wait before a
retry, and the retried transaction (the compare-and-set loop is ``cas.py``)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud.firestore import DELETE_FIELD, AsyncClient, AsyncTransaction
from opentelemetry.trace import Span

from shared.errors import StoreError
from shared.observe import tracing
from shared.store import failures

T = TypeVar("T")

UNAVAILABLE = "Spark AI Agent could not reach its storage right now; please try again."
# A change that keeps losing the race is given up after this many attempts.
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


async def in_transaction(
    client: AsyncClient,
    attempt: Callable[[AsyncTransaction], Awaitable[T]],
    *,
    read_only: bool,
    too_fast: str,
) -> T:
    """``attempt`` (an ``async_transactional`` read-decide-write) in a transaction of
    one try, tried again after a random wait when its reads or its commit are aborted;
    ``StoreError(too_fast)`` after ``MAX_ATTEMPTS``. The family and delivery stores'
    transactions (several users' documents) run here, each one span."""
    with tracing.commit("Firestore transaction") as span:
        return await _in_transaction(client, attempt, span, read_only, too_fast)


async def _in_transaction(
    client: AsyncClient,
    attempt: Callable[[AsyncTransaction], Awaitable[T]],
    span: Span,
    read_only: bool,
    too_fast: str,
) -> T:
    for tried in range(MAX_ATTEMPTS):
        span.set_attribute(tracing.STORE_ATTEMPTS, tried + 1)
        if tried > 0:
            # Never at once by the client library (``max_attempts=1``): on the emulator,
            # transactions that read one document and then write it wait for its lock
            # timeout and are often all aborted together; retried at once they met
            # again in lockstep, round after round, with no winner. Spread out, one wins
            # most rounds (what that took is in docs/operations/known-limits.md).
            # Firestore itself (pessimistic mode, the default) delays or fails one of
            # the contenders instead ("Data contention in transactions" in its
            # documentation). The window doubles up to the emulator's lock timeout
            # (transactions retried within it would meet again).
            await back_off(tried, 0.05, 2.0)
        transaction = client.transaction(max_attempts=1, read_only=read_only)
        with unavailable("Firestore transaction"):
            try:
                return await attempt(transaction)
            except gexc.Aborted:
                continue
            except ValueError as exc:
                if not isinstance(exc.__cause__, gexc.Aborted):
                    raise
                continue  # its commit was aborted (the client library tries once)
    raise StoreError(too_fast)


def in_id_order(collection: Any, after: str | None, limit: int) -> Any:
    """The query of one page of ``collection`` in document id order: the documents after
    ``after`` (from the first: ``None``), at most ``limit``."""
    query = collection.order_by("__name__")
    if after is not None:
        query = query.start_after({"__name__": after})
    return query.limit(limit)


async def ids_after(collection: Any, after: str | None, limit: int) -> list[str]:
    """The ids of one page of ``collection`` (``in_id_order``), no field read.

    Raises:
        StoreError: Firestore failed.
    """
    query = in_id_order(collection, after, limit).select(["__name__"])
    with unavailable("Firestore read"):
        return [snapshot.id async for snapshot in query.stream()]


def changed_fields(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The top-level fields to send: new or changed values, and deletions."""
    fields: dict[str, Any] = {k: v for k, v in after.items() if before.get(k, _MISSING) != v}
    fields.update({k: DELETE_FIELD for k in before.keys() - after.keys()})
    return fields


_MISSING = object()
