"""The ``tasks`` function's work: run a task tool, record its result, let the agent follow up.

Cloud Tasks delivers at least once (the emulator re-delivers freely), so every step
is idempotent and guarded: the ledger lets one delivery own an attempt, results are
appended only if missing, and the follow-up has a deterministic id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta
from typing import Literal

from shared.agent.people import People
from shared.agent.results import (
    answered,
    approved,
    find_call,
    mark_running,
    record_results,
    wants_follow_up,
    with_progress,
)
from shared.agent.service import Agent
from shared.config import Settings
from shared.errors import ConversationTooLarge, RunInProgress, SparkError, ToolError
from shared.llm.base import ToolCallRequest
from shared.schemas.documents import Conversation, Message, ToolCall
from shared.schemas.server import TaskLedger, TaskRecord
from shared.schemas.tasks import (
    AnyTask,
    ExpireTask,
    FollowUpTask,
    ReplyTask,
    ToolTask,
    WatchdogTask,
)
from shared.store.limits import CLOSING_RESERVE
from shared.tasks import ledger as ledgers
from shared.tasks.scheduler import TaskScheduler
from shared.tools.base import DocumentChange, ToolContext, dump_output, error_output

log = logging.getLogger(__name__)

Verdict = Literal["done", "busy"]
"""``done``: acknowledge the delivery. ``busy``: another delivery holds it; retry later."""

TOO_LARGE = (
    "The result was too large to keep in this conversation, which is full. "
    "Tell the user and suggest starting a new conversation."
)
# A follow-up waiting for another run in the conversation is retried this many extra times.
BUSY_RETRIES = 10
# A follow-up to people's results waits this many times (backing off to a minute) for the
# conversation to be free.
FOLLOW_UP_ATTEMPTS = 30


class TaskHandler:
    """Serves one delivery of a task."""

    def __init__(self, agent: Agent, scheduler: TaskScheduler, settings: Settings) -> None:
        self._agent = agent
        self._people = People(agent)
        self._deps = agent.deps
        self._scheduler = scheduler
        self._settings = settings

    async def handle(self, task: AnyTask) -> Verdict:
        if isinstance(task, ReplyTask):
            run = await self._agent.claim(task.user_id, task.conversation_id, task.run_id)
            if run is not None:
                await run.execute()
            return "done"
        if isinstance(task, WatchdogTask):
            run = await self._agent.supervise(task.user_id, task.conversation_id, task.run_id)
            if run is not None:
                await run.execute()
            return "done"
        if isinstance(task, ExpireTask):
            run = await self._people.expire(
                task.user_id, task.conversation_id, task.tool_call_id, task.after_seconds
            )
            if run is not None:
                await run.execute()
            return "done"
        if isinstance(task, FollowUpTask):
            return await self._follow_up_later(task)
        return await self._tool_task(task)

    async def _follow_up_later(self, task: FollowUpTask) -> Verdict:
        conversation = await self._deps.store.get(task.user_id, task.conversation_id)
        source = None if conversation is None else conversation.message(task.message_id)
        if conversation is None or source is None or not wants_follow_up(conversation, source):
            return "done"
        try:
            run = await self._agent.follow_up(task.user_id, task.conversation_id, source)
        except RunInProgress:
            if task.attempt >= FOLLOW_UP_ATTEMPTS:
                log.warning("follow-up of %s: the conversation stayed busy", task.message_id)
                return "done"
            await self._scheduler.enqueue_follow_up(
                task.user_id, task.conversation_id, task.message_id, task.attempt + 1
            )
            return "done"
        if run is not None:
            await run.execute()
        return "done"

    async def _tool_task(self, task: ToolTask) -> Verdict:
        now = self._deps.clock.now()
        policy = self._scheduler.policy

        def change(
            ledger: TaskLedger,
        ) -> tuple[TaskLedger, tuple[ledgers.Claim, TaskRecord | None]]:
            ledger, claim = ledgers.claim(ledger, task.task_id, task.attempt, now, policy)
            return ledger, (claim, ledger.tasks.get(task.task_id))

        claim, record = await self._scheduler.apply(task.user_id, change)
        if claim == "busy":
            return "busy"
        if claim == "stale" or record is None:
            return "done"
        heartbeat = asyncio.create_task(self._keep_lease(task))
        try:
            await self._work(task, record)
        except ConversationTooLarge:
            log.warning("task %s: the conversation is full; ending the task", task.task_id)
            await self._finish(task, "failed", TOO_LARGE)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        return "done"

    async def _keep_lease(self, task: ToolTask) -> None:
        lease = self._scheduler.policy.lease
        while True:
            await self._deps.clock.sleep(lease.total_seconds() / 3)
            until = self._deps.clock.now() + lease

            def change(ledger: TaskLedger, until: datetime = until) -> tuple[TaskLedger, None]:
                return ledgers.renew(ledger, task.task_id, task.attempt, until), None

            try:
                await self._scheduler.apply(task.user_id, change)
            except Exception:
                log.warning("task %s: could not renew its lease", task.task_id, exc_info=True)

    async def _work(self, task: ToolTask, record: TaskRecord) -> None:
        store = self._deps.store
        conversation = await store.get(task.user_id, task.conversation_id)
        found = None if conversation is None else find_call(conversation, record.tool_call_id)
        if conversation is not None and found is None and conversation.active_run is not None:
            # The run that made the call has not saved it yet: come back shortly.
            await self._retry_later(task, self._settings.task_retry_base_ms / 1000, None)
            return
        if conversation is None or found is None:
            log.warning("task %s: its tool call is gone; dropping it", task.task_id)
            await self._finish(task, "failed", "The conversation no longer holds this tool call.")
            return
        message, call = found
        if not approved(call):
            # Its approval has not landed (or it was denied): never run it. The owner's
            # approval queues it anew (``submit(again=True)``).
            await self._finish(task, "cancelled", "Not approved.")
            return
        if call.id not in answered(conversation):
            conversation = await self._run_tool(task, call, conversation.document_id)
            if conversation is None:
                return  # retried later
        stored = find_call(conversation, call.id)
        source = stored[0] if stored else message
        if wants_follow_up(conversation, source) and not await self._follow_up(task, source):
            return  # retried later
        results = [
            p.tool_result
            for m in conversation.messages
            for p in m.content
            if p.tool_result is not None and p.tool_result.tool_call_id == call.id
        ]
        if stored is not None and stored[1].status == "cancelled":
            await self._finish(task, "cancelled")
        else:
            ok = any(r.status == "ok" for r in results)
            await self._finish(task, "completed" if ok else "failed")

    async def _run_tool(
        self, task: ToolTask, call: ToolCall, document_id: str | None
    ) -> Conversation | None:
        """Run the tool and record its result; ``None`` if it will be retried instead."""
        deps, settings = self._deps, self._settings

        async def progress(text: str) -> None:
            await deps.store.mutate(
                task.user_id,
                task.conversation_id,
                lambda c: with_progress(c, call.id, text, deps.clock.now()),
            )

        await deps.store.mutate(
            task.user_id,
            task.conversation_id,
            lambda c: mark_running(c, call.id, deps.clock.now()),
        )
        status: Literal["ok", "error"] = "error"
        change: DocumentChange | None = None
        if task.attempt > settings.task_max_attempts:
            output = error_output(
                _gave_up(call, settings.task_max_attempts, "it stopped responding")
            )
        else:
            try:
                parsed = deps.tools.parse(ToolCallRequest(call.id, call.name, call.args_json))
                context = ToolContext(
                    task.user_id,
                    task.conversation_id,
                    call.id,
                    document_id,
                    progress,
                    self._scheduler.meter(task.user_id),
                )
                result = await parsed.run(context)
                output = dump_output(result.value, settings.tool_output_chars)
                change = result.change
                status = "ok"
            except ToolError as exc:
                output = error_output(exc.message)
            except Exception as exc:
                log.warning("task %s attempt %d failed: %r", task.task_id, task.attempt, exc)
                if task.attempt < settings.task_max_attempts:
                    delay = settings.task_retry_base_ms / 1000 * 2 ** (task.attempt - 1)
                    await self._retry_later(task, delay, _safe(exc))
                    return None
                output = error_output(_gave_up(call, task.attempt, _safe(exc)))
        now = deps.clock.now()
        try:
            return await deps.store.mutate(
                task.user_id,
                task.conversation_id,
                lambda c: record_results(
                    c,
                    {call.id: output},
                    status,
                    now,
                    None if status == "ok" else "The tool failed.",
                    changes={call.id: change} if change else None,
                ),
                reserve=CLOSING_RESERVE,  # new content; the note below may use the room
            )
        except ConversationTooLarge:
            # Never retried for ever: the model hears the result did not fit, and the task
            # ends (freeing its slot) either way.
            log.warning("task %s: its result does not fit the conversation", task.task_id)
            small = error_output(TOO_LARGE)
            return await deps.store.mutate(
                task.user_id,
                task.conversation_id,
                lambda c: record_results(c, {call.id: small}, "error", now, TOO_LARGE),
            )

    async def _follow_up(self, task: ToolTask, source: Message) -> bool:
        """Let the agent answer the results; ``False`` if it must wait (retried later)."""
        try:
            run = await self._agent.follow_up(task.user_id, task.conversation_id, source)
        except RunInProgress:
            if task.attempt >= self._settings.task_max_attempts + BUSY_RETRIES:
                log.warning("task %s: conversation stayed busy; no follow-up", task.task_id)
                return True
            await self._retry_later(task, self._deps.limits.lease_seconds / 3, None)
            return False
        if run is not None:
            await run.execute()
        return True

    async def _retry_later(self, task: ToolTask, delay: float, error: str | None) -> None:
        now = self._deps.clock.now()
        policy = self._scheduler.policy
        record = await self._scheduler.apply(
            task.user_id,
            lambda led: ledgers.reschedule(
                led, task.task_id, task.attempt, now, timedelta(seconds=delay), policy, error
            ),
        )
        if record is not None:
            await self._scheduler.dispatch(task.user_id, [record])

    async def _finish(
        self,
        task: ToolTask,
        status: Literal["completed", "failed", "cancelled"],
        error: str | None = None,
    ) -> None:
        now = self._deps.clock.now()
        policy = self._scheduler.policy
        granted = await self._scheduler.apply(
            task.user_id,
            lambda led: ledgers.finish(led, task.task_id, task.attempt, status, now, policy, error),
        )
        try:
            await self._scheduler.dispatch(task.user_id, granted)
        except Exception:
            # Their leases lapse and the next ledger change grants them again.
            log.exception("task %s: could not dispatch the next tasks", task.task_id)


def _safe(exc: Exception) -> str:
    """What may be said of a failure outside the log (our words, never an SDK's)."""
    return exc.message if isinstance(exc, SparkError) else "an unexpected error"


def _gave_up(call: ToolCall, attempts: int, reason: str) -> str:
    return (
        f"{call.display_text} did not work after {attempts} attempts ({reason}). "
        "Tell the user plainly that it did not work and suggest trying again later."
    )
