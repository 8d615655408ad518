"""The tool calls of a run's step (``StepCalls``): each one checked (a refusal is its
result, which the model hears on the next step), then run inline, queued as a task, or
paused for a person; everything it does recorded as the run's events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shared.agent.run.deps import RunDeps
from shared.agent.stream.events import (
    AgentEvent,
    ApprovalRequiredEvent,
    QuestionEvent,
    TaskQueuedEvent,
    ToolEndEvent,
    ToolStartEvent,
)
from shared.agent.stream.transcript import args_of
from shared.errors import ModerationUnavailable, ToolError
from shared.ids import task_id_for
from shared.llm.base import ToolCallRequest
from shared.schemas.documents import Conversation
from shared.tools.base import ParsedCall, ToolContext
from shared.tools.execute import ToolOutcome, execute, refused, unexpected

log = logging.getLogger(__name__)


NOT_SENT = (
    "This message was not sent: it is not suitable to send. Do not try to send it "
    "another way; tell the user kindly that it could not be sent."
)


class StepCalls:
    """The calls of a run's steps: those queued as tasks and those paused for a person
    (the run's end records both), and the tasks its current step started."""

    def __init__(
        self,
        deps: RunDeps,
        user_id: str,
        conversation: Conversation,
        record: Callable[[AgentEvent], None],
    ) -> None:
        self.deps = deps
        self.user_id = user_id
        self.conversation = conversation
        self.conversation_id = conversation.id
        self._record = record
        self.queued: list[ParsedCall] = []
        self.paused: list[ParsedCall] = []
        self.step_tasks = 0

    async def take(self, call: ToolCallRequest) -> None:
        """Check ``call``, then run it inline, queue it as a task, or pause it for a
        person; a refusal is its result, which the model hears."""
        try:
            parsed = self.deps.tools.parse(call)
        except ToolError as exc:
            # The model hears what was wrong and may correct itself on the next step.
            self._record(
                ToolStartEvent(
                    call.id,
                    call.name,
                    args_of(call.arguments),
                    "Checking a tool call",
                    args_json=call.arguments,
                )
            )
            self._end(call.id, refused(exc.message))
            return
        args_json = parsed.args.model_dump_json()
        if parsed.tool.check is not None and parsed.tool.execution == "inline":
            checked = await self._check(parsed, args_json)
            if checked is None:
                return
            parsed, args_json = checked, checked.args.model_dump_json()
        sends = parsed.needs_approval and parsed.tool.sends is not None
        if sends and not await self._judged(parsed, args_json):
            return
        if parsed.tool.execution in ("question", "client") or parsed.needs_approval:
            self._pause(parsed, args_json)
            return
        if parsed.tool.execution == "task":
            limit = self.deps.limits.task_calls_per_step
            if self.step_tasks >= limit:
                why = (
                    f"At most {limit} background tasks can start in one step; "
                    "ask for the rest in the next step."
                )
                start = ToolStartEvent(
                    call.id,
                    call.name,
                    args_of(args_json),
                    "Checking a tool call",
                    args_json=args_json,
                )
                self._record(start)
                self._end(call.id, refused(why))
                return
            self.step_tasks += 1
            self.queued.append(parsed)
            task_id = task_id_for(self.conversation_id, call.id)
            self._record(
                TaskQueuedEvent(
                    task_id, call.id, call.name, parsed.display_text, args_json=args_json
                )
            )
            return
        await self._run_inline(parsed, args_json)

    async def _judged(self, parsed: ParsedCall, args_json: str) -> bool:
        """Whether the text ``parsed`` would send to others passed the moderator (for a
        covered user; DESIGN §16), before anyone is asked to approve it; a flagged text
        is refused (and the user's parents told), a failed verdict that fails closed too."""
        call = parsed.call
        text = str(getattr(parsed.args, parsed.tool.sends or "", "") or "")
        try:
            verdict = await self.deps.model.judge(self.user_id, text)
        except ModerationUnavailable as exc:
            why = exc.message
        else:
            if verdict is None or not verdict.flagged:
                return True
            why = NOT_SENT
            category = verdict.category or ""
            await self.deps.flags.flag(
                self.user_id, category, "output", self.conversation_id, call.id
            )
        self._record(
            ToolStartEvent(
                call.id, call.name, args_of(args_json), parsed.display_text, args_json=args_json
            )
        )
        self._end(call.id, refused(why))
        return False

    def _pause(self, parsed: ParsedCall, args_json: str) -> None:
        """Persist a call that waits for a person, and tell the client what it waits for."""
        call, tool = parsed.call, parsed.tool
        self.paused.append(parsed)
        if tool.execution == "question":
            questions = parsed.args.model_dump()["questions"]
            self._record(
                QuestionEvent(
                    call.id,
                    questions,
                    tool=call.name,
                    args_json=args_json,
                    display_text=parsed.display_text,
                )
            )
        elif parsed.needs_approval:
            self._record(
                ApprovalRequiredEvent(
                    call.id,
                    call.name,
                    args_of(args_json),
                    parsed.display_text,
                    args_json=args_json,
                    execution=tool.execution,
                )
            )
        else:
            start = ToolStartEvent(
                call.id,
                call.name,
                args_of(args_json),
                parsed.display_text,
                args_json=args_json,
                execution="client",
            )
            self._record(start)

    async def _check(self, parsed: ParsedCall, args_json: str) -> ParsedCall | None:
        """The call as its tool's check pins it (and whether it needs approval), or
        ``None`` once the check's refusal is recorded as the call's result."""
        call = parsed.call
        context = ToolContext(
            self.user_id, self.conversation_id, call.id, self.conversation.document_id
        )
        try:
            return await parsed.checked(context)
        except ToolError as exc:
            why = exc.message
        except Exception:
            log.exception("inline tool %s failed its check", call.name)
            why = unexpected(call.name)
        self._record(
            ToolStartEvent(
                call.id, call.name, args_of(args_json), parsed.display_text, args_json=args_json
            )
        )
        self._end(call.id, refused(why))
        return None

    async def _run_inline(self, parsed: ParsedCall, args_json: str) -> None:
        call = parsed.call
        self._record(
            ToolStartEvent(
                call.id, call.name, args_of(args_json), parsed.display_text, args_json=args_json
            )
        )
        context = ToolContext(
            self.user_id, self.conversation_id, call.id, self.conversation.document_id
        )
        outcome = await execute(parsed, context, self.deps.limits.tool_output_chars)
        if outcome.failure is not None:
            log.error("inline tool %s failed", call.name, exc_info=outcome.failure)
        self._end(call.id, outcome)

    def _end(self, call_id: str, outcome: ToolOutcome) -> None:
        if not outcome.ok:
            self._record(
                ToolEndEvent(
                    call_id,
                    "error",
                    error=outcome.error,
                    output_json=outcome.output_json,
                    description=outcome.description,
                )
            )
            return
        change = outcome.change
        self._record(
            ToolEndEvent(
                call_id,
                "success",
                document_id=change.document_id if change else None,
                version=change.version if change else None,
                output_json=outcome.output_json,
                description=outcome.description,
            )
        )
