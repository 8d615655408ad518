"""A task's progress steps, reported by its tool as it works (``ToolContext.progress``)
and appended to the task's section in throttled writes.

An attempt numbers its steps on from those its section holds: a task resumed after its
user's answer, or retried, runs its tool again as its next attempt, and those steps
(the same texts, often) are new steps to show after the first ones, not repeats of them.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from shared.clock import Clock
from shared.errors import TaskCancelled
from shared.queue.port import TaskPort
from shared.schemas.documents import TaskDocument
from shared.schemas.tasks import ToolTask
from shared.tasks import sections
from shared.throttle import ThrottledWriter

log = logging.getLogger(__name__)


class Steps:
    """A task's progress steps, appended to its section at most once per
    ``TaskPolicy.progress_every`` (each write carries every step reported since the last)."""

    def __init__(self, tasks: TaskPort, task: ToolTask, clock: Clock, every: timedelta) -> None:
        self._tasks, self._task, self._clock = tasks, task, clock
        self._pending: list[sections.Step] = []
        self._count = 0
        self._every = every.total_seconds()
        # Made by the first step this attempt reports (most tools report none).
        self._writer: ThrottledWriter | None = None

    def start(self, section: TaskDocument | None) -> TaskDocument | None:
        """The section shown running (the tool starts, or goes on), and the steps it
        holds already counted, so that this attempt's are numbered after them: a change
        the claim of the attempt writes (``TaskPort.claim``), in the same write.

        Earlier attempts' steps only: this attempt delivered again numbers its steps as
        it did, and the section knows them (keyed by attempt and step). A folded line
        keeps the newest step it stands for."""
        attempt = self._task.attempt
        earlier = [u.step for u in section.updates if u.attempt < attempt] if section else []
        self._count = max(earlier, default=0)
        return sections.started(section, self._clock.now())

    async def report(self, text: str) -> None:
        """A step: first a look at the ledger (the task stops here if its user cancelled
        it; one small read per step), then the step, appended with the next write."""
        try:
            await self._tasks.check_cancel(self._task.user_id, self._task.task_id)
        except TaskCancelled:
            raise
        except Exception:
            # Only the look failed: the tool goes on (its next model call looks again).
            log.warning("task %s: could not look for a cancel", self._task.task_id, exc_info=True)
        self._count += 1
        self._pending.append(sections.Step(self._task.attempt, self._count, text))
        if self._writer is None:
            self._writer = ThrottledWriter(self._write, self._every, self._clock)
        self._writer.touch()

    async def _write(self) -> None:
        steps, self._pending = self._pending, []
        now = self._clock.now()
        try:
            await self._tasks.show(
                self._task.user_id,
                self._task.task_id,
                lambda s: None if s is None else sections.with_steps(s, steps, now),
            )
        except Exception:
            self._pending = steps + self._pending  # the next write carries them
            raise

    async def close(self) -> None:
        """The last steps written; nothing read or written for an attempt that reported
        none (no writer was made, and its final write would change nothing)."""
        if self._writer is None:
            return
        try:
            await self._writer.finish(self._write)
        except Exception:
            log.warning("task %s: progress steps were lost", self._task.task_id, exc_info=True)
