"""Compare-and-set on Firestore: the one retry loop in which every store's
read-judge-write runs (conversations, task ledgers with their sections, openings,
task sections, lessons).

One *attempt* reads what it needs (or takes a copy this process remembers, to save the
read), runs the pure change on it, and writes the result in one commit, each write
with a precondition: that the document is still the version read (its
``update_time``), or, read as missing, that none was made meanwhile. Then one of:

* the commit lands: the attempt returns what was written and what the change decided,
  and so does ``compare_and_set``;
* a precondition fails (``FailedPrecondition``, ``AlreadyExists``, ``NotFound``):
  someone else wrote in between, nothing landed, and the change is judged again on a
  fresh read;
* the attempt judged a *remembered* copy, and the change refused it or found nothing
  to write: that verdict may be out of date (another process may have written since),
  and a verdict that refuses, skips or drops work stands only once a fresh read agrees.
  ``judged`` and ``confirmed`` say so by raising ``Again``: judged on a remembered
  copy, read afresh and judge again;
* anything else propagates: a refusal judged on a fresh read, a document too large,
  and a failed Google API call as ``StoreError``.

The first retry comes at once (the usual loser is a stale remembered copy, not a
racing writer); each later one after a random, doubling wait (``common.back_off``).
After ``MAX_ATTEMPTS`` the change is given up with ``StoreError(too_fast)``.

Each attempt is told whether it must read afresh (every attempt after the first), and
``forget`` (the store's remembered copies of what the attempt read) is called whenever
an attempt does not land: it is to be judged again, or the store failed.

This loop runs on every send and every streaming write: it adds one coroutine and,
per change, one call (``bench/stream_overhead.py`` (a) and (c) measure both paths).
Each change is one span of its own, however many attempts it took, but for a run's
periodic streaming writes, counted and timed on the run's span instead
(``shared/observe/tracing.py`` says why; ``bench/tracing.py`` measures what tracing
costs a stream).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from google.api_core import exceptions as gexc

from shared.errors import StoreError
from shared.observe import tracing
from shared.store.firestore.common import MAX_ATTEMPTS, back_off, unavailable

T = TypeVar("T")

LOST = (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound)
"""What a write whose precondition failed raises: someone else wrote in between."""


class Again(Exception):
    """Raised inside an attempt: nothing was written, and the change must be judged again
    on a fresh read."""


_AGAIN = (Again, *LOST)


def judged(change: Callable[[], T], *, remembered: bool) -> T:
    """``change()``: what it raises on a remembered copy becomes ``Again`` (the copy may
    be out of date: another instance may have ended the run it saw), so only what is
    current is refused.

    Raises:
        Again: ``change`` raised, and ``remembered``.
        Exception: what ``change`` raised, judged on a fresh read.
    """
    try:
        return change()
    except Exception:
        if remembered:
            raise Again from None
        raise


def confirmed(writes: bool, *, remembered: bool) -> None:
    """Let a verdict that writes nothing stand only on a fresh read: "nothing to do"
    judged on a remembered copy may be wrong (another process may have written since),
    and such a verdict skips or drops work. One read; changes that write nothing are rare.

    Raises:
        Again: nothing ``writes``, and the copy judged was ``remembered``.
    """
    if remembered and not writes:
        raise Again


async def compare_and_set(
    attempt: Callable[[bool], Awaitable[T]],
    *,
    too_fast: str,
    tried: str = "Firestore write",
    forget: Callable[[], None] | None = None,
) -> T:
    """Run ``attempt(fresh)`` until one lands, as the module says; what it returned.

    Args:
        attempt: one read-judge-write; ``fresh`` is true when it must not judge a
            remembered copy (every attempt after the first). It raises ``Again`` (or lets
            a lost precondition's error out) when it must be judged again.
        too_fast: the ``StoreError`` message once ``MAX_ATTEMPTS`` have all lost.
        tried: what a failed Google API call is logged as (``"Firestore write"``).
        forget: drops the store's remembered copies of what ``attempt`` reads; called
            after each attempt that does not land.

    Raises:
        StoreError: the store failed, or every attempt lost (``too_fast``).
        Exception: what ``attempt`` raised, other than ``Again`` and a lost race.
    """
    with tracing.commit(tried) as span:
        for tries in range(MAX_ATTEMPTS):
            if tries > 1:
                await back_off(tries)
            span.set_attribute(tracing.STORE_ATTEMPTS, tries + 1)
            try:
                with unavailable(tried):
                    try:
                        return await attempt(tries > 0)
                    except _AGAIN:
                        pass  # someone else wrote, or a remembered copy misled: judge again
            except StoreError:
                if forget is not None:
                    forget()
                raise
            if forget is not None:
                forget()
        raise StoreError(too_fast)
