"""Stopping runs, and the watchdog's look at a run (``Supervision``): each closes what
is over, frees its place and hands on what follows it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from shared.agent.run.deps import RunDeps
from shared.agent.run.loop import Run
from shared.agent.run.runs import request_stop
from shared.agent.run.watch import Watch
from shared.agent.sending.claims import Claims
from shared.queue.port import TaskTools

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Stopped:
    run_id: str | None
    status: Literal["stopping", "stopped"]


class Supervision:
    """Stops and watchdogs; one per process."""

    def __init__(self, deps: RunDeps, watch: Watch, claims: Claims, tasks: TaskTools) -> None:
        self._deps = deps
        self._watch = watch
        self._claims = claims
        self._tasks = tasks

    async def stop(self, user_id: str, conversation_id: str) -> Stopped:
        """Stop the conversation's active run wherever it runs, and its tasks that have
        not started.

        Raises:
            NotFound: no such conversation for this user.
            NoActiveRun: nothing to stop.
        """
        now = self._deps.clock.now()
        before = await self._deps.store.get(user_id, conversation_id)
        run_id = before.active_run.run_id if before and before.active_run else None
        conversation = await self._deps.store.mutate(
            user_id, conversation_id, lambda c: request_stop(c, now, now + self._watch.lease())
        )
        cancelled = [
            task_id
            for task_id, state in (conversation.tasks or {}).items()
            if state.status == "cancelled"
        ]
        if cancelled:
            await self._tasks.cancel(user_id, cancelled)
        await self._watch.hand_on(user_id, conversation)
        active = conversation.active_run
        if active is not None and active.run_id == run_id and active.status == "stopping":
            return Stopped(run_id, "stopping")
        if run_id is not None:
            await self._watch.slot(user_id, run_id).release()  # closed here, at once
        return Stopped(run_id, "stopped")

    async def supervise(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """The watchdog: close ``run_id`` if its producer died, hand on what follows it,
        and look again later while it lives. Returns a run to produce here, if the run
        (or its successor) was queued and nobody took it before its lease lapsed."""
        store, now = self._deps.store, self._deps.clock.now()
        conversation = await store.get(user_id, conversation_id)
        if conversation is None:
            return None
        active = conversation.active_run
        # Ours over: its slot is free, however it ended (idempotent).
        await self._watch.slot(user_id, run_id).release_if_over(conversation)
        if active is None:
            await self._tasks.sweep(user_id)
            return None
        if active.run_id != run_id and active.status != "queued":
            return None  # ours is over; the live run has its own watchdog
        if active.lease_expires_at > now:
            await self._watch.watchdog(user_id, conversation_id, active)
            return None
        if active.status == "queued":
            # Nobody took it: produce it here, watched over like any other run.
            run = await self._claims.claim(user_id, conversation_id, active.run_id)
            if run is not None:
                await self._watch.watchdog(user_id, conversation_id, run.record)
            return run
        await self._watch.close_if_dead(user_id, conversation_id)
        log.warning("run %s: closed if its producer stopped renewing its lease", active.run_id)
        await self._tasks.sweep(user_id)
        return None
