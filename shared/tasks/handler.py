"""The ``tasks`` function's work: run a task tool, record its result, let the agent follow up.

Cloud Tasks delivers at least once (the emulator re-delivers freely), so every step
is idempotent and guarded: the ledger lets one delivery own an attempt, results are
appended only if missing, and the follow-up has a deterministic id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Literal

from shared.agent import Agent, Next, Recorded
from shared.budget.service import Budget
from shared.clock import Clock
from shared.errors import ConversationTooLarge, TaskCancelled
from shared.llm.base import ToolCallRequest
from shared.queue.port import Ended, TaskPort
from shared.schemas.documents import ToolCall
from shared.schemas.server import TaskRecord
from shared.schemas.tasks import (
    AnyTask,
    EraseTask,
    ExpireTask,
    ReplyTask,
    RetentionTask,
    ToolTask,
    WatchdogTask,
)
from shared.store.limits import CLOSING_RESERVE
from shared.tasks import deliveries, sections
from shared.tasks.steps import Steps
from shared.tools.base import Ask, ToolContext, ToolRegistry, error_output
from shared.tools.execute import ToolOutcome, execute_request, refused, safe_reason
from shared.tools.people import question_args, question_text

log = logging.getLogger(__name__)

Verdict = Literal["done", "busy"]
"""``done``: acknowledge the delivery. ``busy``: another delivery holds it; retry later."""

TOO_LARGE = (
    "The result was too large to keep in this conversation, which is full. "
    "Tell the user and suggest starting a new conversation."
)
# A task whose tool call is gone (or its whole conversation) ends failed, saying so.
GONE = "The conversation no longer holds this tool call."
# A follow-up waiting for another run in the conversation is retried this many extra times.
BUSY_RETRIES = 10


@dataclass(frozen=True, slots=True)
class TaskPolicy:
    """How task tools are run and retried; ``policies.task_policy_of`` gives the values."""

    max_attempts: int
    # The first retry's delay (doubling with each attempt after it).
    retry_base: timedelta
    # An attempt's lease (the ledger's): renewed every third of it while the tool runs.
    lease: timedelta
    # Characters of a tool's output kept for the model.
    output_chars: int
    # How long a task whose conversation has a live run waits before trying again.
    busy_wait: timedelta
    # A task's section takes at most one write of progress steps per this interval.
    progress_every: timedelta = timedelta(milliseconds=500)


class TaskHandler:
    """Serves one delivery of a task."""

    def __init__(
        self,
        agent: Agent,
        clock: Clock,
        tools: ToolRegistry,
        tasks: TaskPort,
        budget: Budget,
        policy: TaskPolicy,
    ) -> None:
        self._agent = agent
        self._clock = clock
        self._tools = tools
        self._tasks = tasks
        # A task tool's model calls reserve from its user's day, and stop once its user
        # cancels it (``Budget.meter`` with the task's id).
        self._budget = budget
        self._policy = policy

    async def handle(self, task: AnyTask) -> Verdict:
        """Serve one delivery of ``task`` (a span, and its metrics: ``deliveries.py``)."""
        with deliveries.delivered(task):
            verdict = await self._handle(task)
            if verdict == "busy":
                deliveries.mark("busy")
            return verdict

    async def _handle(self, task: AnyTask) -> Verdict:
        if isinstance(task, ToolTask):
            return await self._tool_task(task)
        if isinstance(task, EraseTask):
            await self._agent.erase_step(task)
            return "done"
        if isinstance(task, RetentionTask):
            await self._agent.sweep(task)
            return "done"
        user_id, conversation_id = task.user_id, task.conversation_id
        if isinstance(task, ReplyTask):
            run = await self._agent.claim(user_id, conversation_id, task.run_id)
        elif isinstance(task, WatchdogTask):
            run = await self._agent.supervise(user_id, conversation_id, task.run_id)
        elif isinstance(task, ExpireTask):
            run = await self._agent.expire(
                user_id, conversation_id, task.tool_call_id, task.after_seconds
            )
        else:  # a follow-up that waited for the conversation to be free (produced there)
            await self._agent.follow_up(user_id, conversation_id, task.message_id, task.attempt + 1)
            return "done"
        if run is not None:
            await run.execute()
        return "done"

    async def _tool_task(self, task: ToolTask) -> Verdict:
        steps = Steps(self._tasks, task, self._clock, self._policy.progress_every)
        record = await self._tasks.claim(task.user_id, task.task_id, task.attempt, steps.start)
        if record == "busy":
            return "busy"
        if isinstance(record, str):  # stale
            return "done"
        heartbeat = asyncio.create_task(self._keep_lease(task))
        try:
            await self._work(task, record, steps)
        except ConversationTooLarge:
            log.warning("task %s: the conversation is full; ending the task", task.task_id)
            await self._finish(task, "failed", TOO_LARGE)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        return "done"

    async def _keep_lease(self, task: ToolTask) -> None:
        every = self._policy.lease.total_seconds() / 3
        while True:
            await self._clock.sleep(every)
            try:
                await self._tasks.renew(task.user_id, task.task_id, task.attempt)
            except Exception:
                log.warning("task %s: could not renew its lease", task.task_id, exc_info=True)

    async def _work(self, task: ToolTask, record: TaskRecord, steps: Steps) -> None:
        conversation, seen = await self._agent.begin_tool(
            task.user_id,
            task.conversation_id,
            record.tool_call_id,
            cancel_requested=bool(record.cancel_requested),
        )
        if seen.found == "unsaved":
            # The run that made the call has not saved it yet: come back shortly.
            await self._retry_later(task, self._policy.retry_base, None)
            return
        if conversation is None or seen.message is None or seen.call is None:
            log.warning("task %s: its tool call is gone; dropping it", task.task_id)
            await self._gone(task, conversation is None)
            return
        message, call = seen.message, seen.call
        if seen.found == "unapproved":
            # Never run it: the owner's approval queues it anew (``submit(again=True)``).
            await self._finish(task, "cancelled", sections.NOT_APPROVED)
            return
        if seen.found == "asked":
            await self._wait(task, seen.text or "")
            return
        # ``cancel``: its user asked it to stop, and the attempt that ran it is gone; the
        # write that judged it gave the call that result (``begin_tool``).
        if seen.found == "run":
            document_id = conversation.document_id
            outcome = await self._run_tool(task, call, document_id, seen.text, steps)
            if outcome is None:
                return  # retried later, or waiting for its user's answer
            going = await self._record(task, call, message.id, outcome)
            if going is None:
                return  # recorded; the follow-up is retried later
            if going.conversation is None:
                await self._gone(task, deleted=True)
                return
            end = self._agent.after_tool(going.conversation, call.id, message, task.task_id)
        else:
            end = self._agent.after_tool(conversation, call.id, message, task.task_id)
            if end.follow_up:
                following = self._agent.follow_up(
                    task.user_id, task.conversation_id, end.source.id, None
                )
                if await self._follow_up(task, following) is None:
                    return  # retried later
        ending = None
        if end.ended != "cancelled" and end.result is not None:
            ok = end.ended == "completed"
            ending = sections.summarise(call.name, end.result.output_json, ok)
        await self._finish(task, end.ended, end.error, ending)

    async def _run_tool(
        self,
        task: ToolTask,
        call: ToolCall,
        document_id: str | None,
        answer: str | None,
        steps: Steps,
    ) -> ToolOutcome | Literal["cancelled"] | None:
        """Run the tool (its section shows it running since the claim: ``Steps.start``):
        its outcome, ``cancelled`` by its user at a step, or ``None`` if it will be
        retried instead, or waits for its user's answer to the question it asked."""
        try:
            outcome = await self._execute(task, call, document_id, steps.report, answer)
        except TaskCancelled:
            log.info("task %s: cancelled by its user at a step", task.task_id)
            return "cancelled"
        finally:
            await steps.close()
        if outcome is None:
            return None
        if outcome.ask is not None and answer is None and await self._ask(task, call, outcome.ask):
            return None
        return outcome

    async def _ask(self, task: ToolTask, call: ToolCall, ask: Ask) -> bool:
        """Put the tool's question to the user in a call of its own and wait; ``False``
        when it cannot be put that way (its output then goes to the model as it is)."""
        args_json = question_args(ask)
        if args_json is None:
            return False
        await self._agent.ask_for_task(task.user_id, task.conversation_id, call.id, args_json)
        await self._wait(task, question_text(args_json))
        return True

    async def _wait(self, task: ToolTask, question: str) -> None:
        """The task waits on the user: the ledger frees the slot until the answer queues
        it again (``People.answer``), and the section shows ``question``, in one write."""
        await self._tasks.wait(task.user_id, task.task_id, task.attempt, question)

    async def _execute(
        self,
        task: ToolTask,
        call: ToolCall,
        document_id: str | None,
        progress: Callable[[str], Awaitable[None]],
        answer: str | None,
    ) -> ToolOutcome | None:
        """Run the tool: its outcome, or ``None`` if it will be retried instead."""
        policy = self._policy
        if task.attempt > policy.max_attempts:
            deliveries.mark("dead_letter")
            outcome = refused(_gave_up(call, policy.max_attempts, "it stopped responding"))
        else:
            context = ToolContext(
                task.user_id,
                task.conversation_id,
                call.id,
                document_id,
                progress,
                self._budget.meter(task.user_id, task.task_id),
                answer,
            )
            request = ToolCallRequest(call.id, call.name, call.args_json)
            outcome = await execute_request(self._tools, request, context, policy.output_chars)
            if (failure := outcome.failure) is not None:
                log.warning("task %s attempt %d failed: %r", task.task_id, task.attempt, failure)
                if task.attempt < policy.max_attempts:
                    delay = policy.retry_base * 2 ** (task.attempt - 1)
                    await self._retry_later(task, delay, safe_reason(failure))
                    return None
                deliveries.mark("dead_letter")
                outcome = refused(_gave_up(call, task.attempt, safe_reason(failure)))
        return outcome

    async def _record(
        self, task: ToolTask, call: ToolCall, source_id: str, outcome: Recorded
    ) -> Next | None:
        """Record the tool's result, and in the same write let the agent follow up
        (``_follow_up``). Cancelled by its user, the call gets the result the model sees
        (the task then ends ``cancelled``)."""
        # ``Agent.record_result``: the result and the follow-up's opening in one write.
        record = partial(
            self._agent.record_result, task.user_id, task.conversation_id, source_id, call.id
        )
        if isinstance(outcome, str):  # "cancelled"
            return await self._follow_up(task, record(outcome))
        try:
            # New content; the note below may use the room kept for closing.
            return await self._follow_up(task, record(outcome, reserve=CLOSING_RESERVE))
        except ConversationTooLarge:
            # Never retried for ever: the model hears the result did not fit, and the task
            # ends (freeing its slot) either way.
            log.warning("task %s: its result does not fit the conversation", task.task_id)
            small = ToolOutcome(error_output(TOO_LARGE), error=TOO_LARGE)
            return await self._follow_up(task, record(small, task_error=TOO_LARGE))

    async def _follow_up(self, task: ToolTask, following: Awaitable[Next]) -> Next | None:
        """The agent's answer to a step's results (``following``: ``Agent.follow_up``, or
        ``Agent.record_result`` recording one in the same write), produced here, now;
        ``None`` if the follow-up must wait (retried later)."""
        going = await following
        if going.status == "busy":
            if task.attempt >= self._policy.max_attempts + BUSY_RETRIES:
                log.warning("task %s: conversation stayed busy; no follow-up", task.task_id)
                return going
            await self._retry_later(task, self._policy.busy_wait, None)
            return None
        return going

    async def _retry_later(self, task: ToolTask, delay: timedelta, error: str | None) -> None:
        deliveries.mark("retry")
        await self._tasks.reschedule(task.user_id, task.task_id, task.attempt, delay, error)

    async def _gone(self, task: ToolTask, deleted: bool) -> None:
        """End the task whose call is gone; its conversation ``deleted``, its record
        leaves the ledger too (the delete removed its section)."""
        await self._finish(task, "failed", GONE)
        if deleted:
            await self._tasks.forget_conversation(task.user_id, task.conversation_id)

    async def _finish(
        self,
        task: ToolTask,
        status: Ended,
        error: str | None = None,
        ending: sections.Ending | None = None,
    ) -> None:
        summary, outputs = (None, ()) if ending is None else (ending.summary, ending.key_outputs)
        await self._tasks.finish(
            task.user_id, task.task_id, task.attempt, status, error, summary, outputs
        )


def _gave_up(call: ToolCall, attempts: int, reason: str) -> str:
    return (
        f"{call.display_text} did not work after {attempts} attempts ({reason}). "
        "Tell the user plainly that it did not work and suggest trying again later."
    )
