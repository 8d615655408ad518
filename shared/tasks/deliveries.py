"""Each delivery of a task, observed: one span (a child of the trace the task carried,
``functions/spark_http/tasks.py``) and its metrics (``metrics.task_delivered``: its
kind, outcome, duration and attempt).

The outcome is decided deep in the handler (a retry asked for, a task given up), so
the delivery under way is found through a context variable, as OpenTelemetry finds the
current span: ``mark`` names it from wherever the handler decides.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from shared.observe import setup, tracing
from shared.schemas.tasks import AnyTask, EraseTask, FollowUpTask, RetentionTask, ToolTask

Outcome = Literal["done", "busy", "retry", "dead_letter", "error"]
"""``done``: acknowledged; ``busy``: another delivery holds it; ``retry``: it is to run
again later; ``dead_letter``: given up after its last attempt; ``error``: it failed
(the queue delivers it again)."""


@dataclass(slots=True)
class _Delivery:
    outcome: Outcome = "done"


_current: ContextVar[_Delivery | None] = ContextVar("spark_delivery", default=None)


def attempt_of(task: AnyTask) -> int:
    """Which attempt of its work ``task`` is (1 the first)."""
    if isinstance(task, ToolTask):
        return task.attempt
    return task.attempt + 1 if isinstance(task, FollowUpTask) else 1


@contextmanager
def delivered(task: AnyTask) -> Iterator[None]:
    """Observe the delivery of ``task`` inside the block."""
    seen, began, attempt = _Delivery(), time.monotonic(), attempt_of(task)
    token = _current.set(seen)
    try:
        about = _about(task)
        with tracing.delivery(task.kind, attempt, about) as span:
            try:
                yield
            except BaseException:
                seen.outcome = "error"
                raise
            finally:
                span.set_attribute(tracing.TASK_OUTCOME, seen.outcome)
    finally:
        _current.reset(token)
        if (metrics := setup.process_metrics()) is not None:
            metrics.task_delivered(task.kind, seen.outcome, time.monotonic() - began, attempt)


def _about(task: AnyTask) -> str:
    """What the delivery works on: its conversation, erasure or sweep page."""
    if isinstance(task, EraseTask):
        return task.deletion_id
    if isinstance(task, RetentionTask):
        return f"retention-{task.page}"
    return task.conversation_id


def mark(outcome: Outcome) -> None:
    """Say how the delivery under way ends (nothing outside a delivery)."""
    seen = _current.get()
    if seen is not None:
        seen.outcome = outcome
