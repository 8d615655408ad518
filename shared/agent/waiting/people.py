"""People's results (answers, approvals, client tools): each resumes the agent through
the same path as task results, "a result arrived, continue the agent"
(``shared/agent/waiting/continuation.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from shared.agent.run.deps import RunDeps
from shared.agent.run.loop import Run
from shared.agent.waiting.continuation import Continuation
from shared.agent.waiting.questions import close_task_question
from shared.agent.waiting.results import (
    CANCELLED_BY_USER,
    approve,
    cancel_by_user,
    find_call,
    pending_call,
    record_results,
)
from shared.agent.waiting.whose import PersonKind
from shared.errors import AlreadyAnswered, NotFound, SparkError
from shared.queue.port import TaskTools
from shared.schemas.documents import Conversation, ToolCall
from shared.tools.base import dump_output, error_output
from shared.tools.people import answers_output

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a person's result did: ``accepted``, the agent goes on (``run`` to stream now;
    or a task produces it, also once a slot frees); ``recorded``, other calls of the step
    still wait."""

    conversation_id: str
    status: Literal["accepted", "recorded"]
    run: Run | None = None


@dataclass(frozen=True, slots=True)
class TaskCancel:
    """What a cancel did: ``cancelled`` at once (the task had not started, or waited for
    an answer), or ``cancelling``: its tool is running and stops at its next step."""

    conversation_id: str
    status: Literal["cancelled", "cancelling"]


Record = Callable[[Conversation, ToolCall], Conversation]


class People:
    """Results that people give (answers, approvals, client tools), each resuming the
    agent through the same path as task results: record it, then, once every call of
    the step has its result, open the follow-up, in the same write."""

    def __init__(self, continuation: Continuation, deps: RunDeps, scheduler: TaskTools) -> None:
        self._continuation = continuation
        self._deps = deps
        self._scheduler = scheduler

    async def answer(
        self,
        user_id: str,
        conversation_id: str,
        call_id: str,
        answers: dict[str, str | list[str]],
        *,
        background: bool,
    ) -> Resumed:
        """Record the answers to an ``ask_user_question`` call (checked against its
        stored options) as a hidden result, and resume the agent.

        Raises:
            NotFound, AlreadyAnswered, RequestError: nothing changes.
        """
        now = self._deps.clock.now()
        current = await self._deps.store.get(user_id, conversation_id)
        if current is None:
            raise NotFound("No conversation with this id.")
        asked = pending_call(current, call_id, "question")  # refused here: nothing written
        if asked.for_call is not None:
            return await self._answer_task(user_id, current, asked, answers)

        def record(conversation: Conversation, call: ToolCall) -> Conversation:
            output = answers_output(call.args_json, answers)
            return record_results(conversation, {call.id: output}, "ok", now, hidden=True)

        return await self._deliver(
            user_id, conversation_id, call_id, "question", record, background=background
        )

    async def _answer_task(
        self,
        user_id: str,
        conversation: Conversation,
        question: ToolCall,
        answers: dict[str, str | list[str]],
    ) -> Resumed:
        """The answer to a task's question: recorded, and the task queued again to go on
        with it in the same section (the agent follows up the task's result, as ever).
        Into the ledger first, like an approval: should the answer then not be written,
        the task finds its question still open and waits again."""
        output = answers_output(question.args_json, answers)  # refused here: nothing written
        found = find_call(conversation, question.for_call or "")
        if found is None:
            raise NotFound("No tool call with this id in this conversation.")
        task_call = found[1]
        tasks, now = self._deps.tasks, self._deps.clock.now()
        granted = await tasks.submit(
            user_id,
            conversation.id,
            [(task_call.id, task_call.name, task_call.display_text)],
            again=True,
            answered=True,
        )

        def record(current: Conversation) -> Conversation:
            pending_call(current, question.id, "question")
            return record_results(current, {question.id: output}, "ok", now, hidden=True)

        await self._deps.store.mutate(user_id, conversation.id, record)
        try:
            await tasks.dispatch(user_id, granted)
        except SparkError:
            log.warning("task of %s: not dispatched yet; a sweep grants it again", question.id)
        return Resumed(conversation.id, "accepted")

    async def decide(
        self,
        user_id: str,
        conversation_id: str,
        call_id: str,
        *,
        approved: bool,
        reason: str | None = None,
        background: bool,
    ) -> Resumed:
        """The owner's decision on a call awaiting approval. Approved, the server runs
        the call with the arguments it stored (validated again); denied, the model is
        told why. A second decision is refused.

        Raises:
            NotFound, AlreadyAnswered, RequestError: nothing changes.
        """
        now = self._deps.clock.now()
        if not approved:
            why = f"The user declined: {reason}" if reason else "The user declined."

            def deny(conversation: Conversation, call: ToolCall) -> Conversation:
                output = json.dumps({"error": why}, ensure_ascii=False)
                return record_results(
                    conversation,
                    {call.id: output},
                    "error",
                    now,
                    call_status="denied",
                    task_status="completed",
                )

            return await self._deliver(
                user_id, conversation_id, call_id, "approval", deny, background=background
            )
        # Into the ledger first (idempotent by task id): whatever happens next, the
        # approved call is run by a task, once, with its retries and its follow-up. The
        # task runs it only once the call is recorded as approved (``approved``).
        current = await self._deps.store.get(user_id, conversation_id)
        if current is None:
            raise NotFound("No conversation with this id.")
        call = pending_call(current, call_id, "approval")  # refused here: nothing written
        tasks = self._deps.tasks
        granted = await tasks.submit(
            user_id, conversation_id, [(call.id, call.name, call.display_text)], again=True
        )
        await self._deps.store.mutate(user_id, conversation_id, lambda c: approve(c, call_id, now))
        try:
            await tasks.dispatch(user_id, granted)
        except SparkError:
            log.warning("approved call %s: not dispatched yet; a sweep grants it again", call_id)
        return Resumed(conversation_id, "accepted")

    async def submit_result(
        self,
        user_id: str,
        conversation_id: str,
        call_id: str,
        output: object,
        *,
        ok: bool,
        background: bool,
    ) -> Resumed:
        """Record what the client's tool gave back, and resume the agent.

        Raises:
            NotFound, AlreadyAnswered, RequestError: nothing changes.
        """
        now = self._deps.clock.now()
        text = dump_output(output, self._deps.limits.tool_output_chars)

        def record(conversation: Conversation, call: ToolCall) -> Conversation:
            status: Literal["ok", "error"] = "ok" if ok else "error"
            return record_results(conversation, {call.id: text}, status, now)

        return await self._deliver(
            user_id, conversation_id, call_id, "client", record, background=background
        )

    async def expire(
        self, user_id: str, conversation_id: str, call_id: str, seconds: float
    ) -> Run | None:
        """A client call's time (``seconds``) is up: an error result if it still has
        none, then the follow-up (returned, for the tasks function to produce)."""
        why = f"The user's editor did not answer within {seconds:.0f} seconds."
        now = self._deps.clock.now()

        def record(conversation: Conversation, call: ToolCall) -> Conversation:
            return record_results(conversation, {call.id: error_output(why)}, "error", now)

        try:
            resumed = await self._deliver(
                user_id, conversation_id, call_id, "client", record, background=False
            )
        except (NotFound, AlreadyAnswered):
            return None  # answered in time, or gone
        return resumed.run

    async def cancel_task(self, user_id: str, task_id: str) -> TaskCancel:
        """Cancel a task. One that has not started (or waits for an answer) ends at once:
        its slot frees, its section ends, its call gets an error result the model sees,
        and the agent follows up (in a task). One whose tool is running is asked to stop:
        its handler does all of that at the tool's next step (``TaskHandler``).

        Raises:
            NotFound: the user has no such task. TaskFinished: nothing changes.
        """
        record = await self._scheduler.cancel_task(user_id, task_id, CANCELLED_BY_USER)
        if record.status == "running":
            return TaskCancel(record.conversation_id, "cancelling")
        now = self._deps.clock.now()

        def cancel(conversation: Conversation, call: ToolCall) -> Conversation:
            closed = close_task_question(conversation, call.id, now, CANCELLED_BY_USER)
            return cancel_by_user(closed, call.id, now)

        # The call may be gone, or have a result already: the task is cancelled anyway.
        with contextlib.suppress(NotFound, AlreadyAnswered):
            await self._deliver(
                user_id, record.conversation_id, record.tool_call_id, None, cancel, background=True
            )
        return TaskCancel(record.conversation_id, "cancelled")

    async def _deliver(
        self,
        user_id: str,
        conversation_id: str,
        call_id: str,
        kind: PersonKind | None,
        record: Record,
        *,
        background: bool,
    ) -> Resumed:
        """Record a person's result with ``record`` and let the agent go on
        (``Continuation.go_on``)."""

        def change(conversation: Conversation) -> tuple[Conversation, str]:
            if kind is not None:
                pending_call(conversation, call_id, kind)
            found = find_call(conversation, call_id)
            if found is None:
                raise NotFound("No tool call with this id in this conversation.")
            return record(conversation, found[1]), found[0].id

        going = await self._continuation.go_on(
            user_id, conversation_id, change, background=background
        )
        if going.status == "over":
            return Resumed(conversation_id, "recorded")
        return Resumed(conversation_id, "accepted", going.run)
