"""One run of the agent loop: the model decides, tools run, the reply is persisted.

A run streams up to ``max_steps`` model calls (shared by a turn and its task
follow-ups). Inline tools run between steps, inside the run; task tools end the run
with status ``queued`` and continue on Cloud Tasks (``shared/tasks/handler.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from shared.agent.events import (
    AgentEvent,
    DoneEvent,
    ErrorEvent,
    RunStartEvent,
    TaskQueuedEvent,
    TextEvent,
    ToolEndEvent,
    ToolStartEvent,
)
from shared.agent.history import build_history
from shared.agent.runs import INTERRUPTED, finish_run, put_message
from shared.agent.throttle import ThrottledWriter
from shared.errors import (
    INTERNAL_MESSAGE,
    ContentFiltered,
    IncompleteResponse,
    SparkError,
    ToolError,
)
from shared.llm.base import Finish, ModelRequest, TextDelta, ToolCallRequest
from shared.schemas.documents import (
    ActiveRun,
    ContentPart,
    Conversation,
    Message,
    MessageError,
    TaskState,
    ToolCall,
    ToolResult,
)
from shared.tasks.naming import task_id_for
from shared.tools.base import ParsedCall, ToolContext, dump_output, error_output

if TYPE_CHECKING:
    from shared.agent.service import AgentService

log = logging.getLogger(__name__)

Emit = Callable[[AgentEvent], None]
Outcome = Literal["complete", "queued"]

STEP_LIMIT_NOTE = (
    "\n\n(Spark AI Agent stopped after the most steps allowed for one reply. "
    "Ask me to carry on if there is more to do.)"
)


def ignore(event: AgentEvent) -> None:
    """The emit of a run nobody listens to (task follow-ups, ``202`` replies)."""


@dataclass
class Run:
    """One run: the model's reply to one user message (or to task results)."""

    service: AgentService
    user_id: str
    conversation: Conversation
    record: ActiveRun
    user_message: Message | None
    assistant: Message
    steps_before: int = 0
    _parts: list[ContentPart] = field(default_factory=list)
    _text: list[str] = field(default_factory=list)
    _tasks: dict[str, TaskState] = field(default_factory=dict)
    _queued: list[ParsedCall] = field(default_factory=list)

    @property
    def conversation_id(self) -> str:
        return self.conversation.id

    def _content(self) -> list[ContentPart]:
        if not self._text:
            return list(self._parts)
        return [*self._parts, ContentPart.of_text("".join(self._text))]

    def _flush_text(self) -> None:
        if self._text:
            self._parts.append(ContentPart.of_text("".join(self._text)))
            self._text = []

    def _snapshot(self, **update: object) -> Message:
        return self.assistant.model_copy(update={"content": self._content(), **update})

    async def _put(self) -> None:
        service = self.service
        lease_until = service.clock.now() + timedelta(seconds=service.settings.run_lease_seconds)
        message = self._snapshot()
        await service.store.mutate(
            self.user_id, self.conversation_id, lambda c: put_message(c, message, lease_until)
        )

    async def _finish(self, message: Message) -> None:
        service = self.service
        now = service.clock.now()
        tasks = dict(self._tasks)
        await service.store.mutate(
            self.user_id,
            self.conversation_id,
            lambda c: finish_run(c, self.record.run_id, message, now, tasks),
        )

    async def execute(self, emit: Emit = ignore) -> None:
        """Run the loop and persist the reply; never raises except on cancellation.

        Events go to ``emit`` as they happen. On failure the message ends with
        status ``error`` (keeping what was streamed so far) and an ``error`` event.
        """
        service = self.service
        emit(
            RunStartEvent(
                run_id=self.record.run_id,
                conversation_id=self.conversation_id,
                user_message_id=self.user_message.id if self.user_message else None,
                assistant_message_id=self.assistant.id,
            )
        )
        writer = ThrottledWriter(self._put, service.settings.throttle_ms / 1000, service.clock)
        try:
            outcome = await self._with_heartbeat(emit, writer)
        except SparkError as exc:
            await self._fail(writer, emit, exc.code, exc.message)
            return
        except asyncio.CancelledError:
            await asyncio.shield(self._fail(writer, emit, INTERRUPTED.code, INTERRUPTED.message))
            raise
        except Exception:
            log.exception("run %s failed unexpectedly", self.record.run_id)
            await self._fail(writer, emit, "internal", INTERNAL_MESSAGE)
            return
        try:
            await writer.finish(lambda: self._finish(self._snapshot(status="complete")))
        except Exception as exc:
            # The message stays "streaming" until its lease lapses; the next send closes it.
            log.exception("run %s: final write failed", self.record.run_id)
            code = exc.code if isinstance(exc, SparkError) else "internal"
            emit(ErrorEvent(message="Your reply could not be saved; please try again.", code=code))
            return
        if outcome == "queued" and not await self._hand_over(emit):
            return
        emit(DoneEvent(message_id=self.assistant.id, status=outcome))

    async def abort(self, exc: SparkError) -> None:
        """End a run that never started (its reply could not be scheduled) as an error."""
        failed = self._snapshot(
            status="error", error=MessageError(code=exc.code, message=exc.message)
        )
        try:
            await self._finish(failed)
        except Exception:
            log.exception("run %s: could not record that it never started", self.record.run_id)

    async def _with_heartbeat(self, emit: Emit, writer: ThrottledWriter) -> Outcome:
        heartbeat = asyncio.create_task(self._heartbeat(writer))
        try:
            return await self._loop(emit, writer)
        finally:
            heartbeat.cancel()

    async def _heartbeat(self, writer: ThrottledWriter) -> None:
        """Renew the lease while the model is silent, so a slow model is not taken for dead."""
        period = self.service.settings.run_lease_seconds / 3
        while True:
            await self.service.clock.sleep(period)
            writer.touch()

    async def _loop(self, emit: Emit, writer: ThrottledWriter) -> Outcome:
        service = self.service
        steps = max(service.settings.max_steps - self.steps_before, 1)
        for step in range(steps):
            last = step == steps - 1
            calls = await self._model_step(emit, writer, offer_tools=not last)
            if not calls:
                return "complete"
            if last:
                # Tools were not offered on the last step; a model that still asks is stopped.
                self._text.append(STEP_LIMIT_NOTE)
                return "complete"
            self._flush_text()
            for call in calls:
                await self._take_call(call, emit, writer)
            if self._queued:
                return "queued"
        return "complete"

    async def _model_step(
        self, emit: Emit, writer: ThrottledWriter, offer_tools: bool
    ) -> list[ToolCallRequest]:
        service = self.service
        previous = [m for m in self.conversation.messages if m.id != self.assistant.id]
        if self._parts or self._text:
            previous.append(self._snapshot(status="complete"))
        history = build_history(previous, service.settings.history_messages)
        tools = service.tools.specs() if offer_tools else ()
        request = ModelRequest(system=service.system_prompt, messages=history, tools=tools)
        finish: Finish | None = None
        calls: list[ToolCallRequest] = []
        async for event in service.provider.stream(request):
            if writer.fatal is not None:
                raise writer.fatal
            if isinstance(event, TextDelta):
                if event.text:
                    self._text.append(event.text)
                    emit(TextEvent(event.text))
                    writer.touch()
            elif isinstance(event, ToolCallRequest):
                calls.append(event)
            else:
                finish = event
        if finish is None:
            raise IncompleteResponse("The model's reply was cut off before it finished.")
        if finish.reason == "content_filter":
            raise ContentFiltered(
                "Spark AI Agent stopped this reply because the content filter flagged it."
            )
        return calls

    def _set_part(self, part: ContentPart) -> None:
        call_id = part.tool_call.id if part.tool_call else None
        for i, existing in enumerate(self._parts):
            if existing.tool_call is not None and existing.tool_call.id == call_id:
                self._parts[i] = part
                return
        self._parts.append(part)

    async def _take_call(self, call: ToolCallRequest, emit: Emit, writer: ThrottledWriter) -> None:
        try:
            parsed = self.service.tools.parse(call)
        except ToolError as exc:
            # The model hears what was wrong and may correct itself on the next step.
            tool = self.service.tools.get(call.name)
            execution = tool.execution if tool else "inline"
            self._set_part(
                _call_part(call, call.arguments, "Checking a tool call", execution, "error")
            )
            self._parts.append(_result_part(call.id, error_output(exc.message), "error"))
            emit(ToolStartEvent(call.id, call.name, {}, "Checking a tool call"))
            emit(ToolEndEvent(call.id, "error", error=exc.message))
            writer.touch()
            return
        args_json = parsed.args.model_dump_json()
        if parsed.tool.execution == "task":
            self._set_part(_call_part(call, args_json, parsed.display_text, "task", "queued"))
            task_id = task_id_for(self.conversation_id, call.id)
            self._tasks[task_id] = TaskState(
                status="queued",
                tool=call.name,
                tool_call_id=call.id,
                display_text=parsed.display_text,
                updated_at=self.service.clock.now(),
            )
            self._queued.append(parsed)
            writer.touch()
            return
        await self._run_inline(parsed, args_json, emit, writer)

    async def _run_inline(
        self, parsed: ParsedCall, args_json: str, emit: Emit, writer: ThrottledWriter
    ) -> None:
        call, display = parsed.call, parsed.display_text
        self._set_part(_call_part(call, args_json, display, "inline", "running"))
        emit(ToolStartEvent(call.id, call.name, json.loads(args_json), display))
        writer.touch()
        context = ToolContext(self.user_id, self.conversation_id, call.id)
        error: str | None = None
        try:
            output = dump_output(await parsed.run(context), self.service.settings.tool_output_chars)
        except ToolError as exc:
            error = exc.message
        except Exception:
            log.exception("inline tool %s failed", call.name)
            error = f"The {call.name} tool failed unexpectedly; try another way."
        status: Literal["ok", "error"] = "ok" if error is None else "error"
        self._set_part(
            _call_part(call, args_json, display, "inline", "complete" if error is None else "error")
        )
        self._parts.append(
            _result_part(call.id, output if error is None else error_output(error), status)
        )
        emit(ToolEndEvent(call.id, "success" if error is None else "error", error=error))
        writer.touch()

    async def _hand_over(self, emit: Emit) -> bool:
        """Give the queued tool calls to the scheduler; on failure record them as failed."""
        service = self.service
        calls = [(p.call.id, p.call.name, p.display_text) for p in self._queued]
        try:
            await service.scheduler.submit(self.user_id, self.conversation_id, calls)
        except SparkError as exc:
            log.warning("run %s: could not queue its tasks: %s", self.record.run_id, exc)
            await service.scheduler.abandon(self.user_id, self.conversation_id, calls)
            emit(
                ErrorEvent(
                    message="Spark AI Agent could not start the background work; please try again.",
                    code=exc.code,
                )
            )
            return False
        for call_id, tool, display in calls:
            emit(
                TaskQueuedEvent(task_id_for(self.conversation_id, call_id), call_id, tool, display)
            )
        return True

    async def _fail(self, writer: ThrottledWriter, emit: Emit, code: str, message: str) -> None:
        self._queued.clear()
        failed = self._snapshot(status="error", error=MessageError(code=code, message=message))
        try:
            await writer.finish(lambda: self._finish(failed))
        except Exception:
            log.exception("run %s: could not record its failure", self.record.run_id)
        emit(ErrorEvent(message=message, code=code))


def _call_part(
    call: ToolCallRequest, args_json: str, display: str, execution: str, status: str
) -> ContentPart:
    return ContentPart(
        type="tool_call",
        tool_call=ToolCall.model_validate(
            {
                "id": call.id,
                "name": call.name,
                "args_json": args_json,
                "display_text": display,
                "execution": execution,
                "status": status,
            }
        ),
    )


def _result_part(call_id: str, output_json: str, status: Literal["ok", "error"]) -> ContentPart:
    return ContentPart(
        type="tool_result",
        tool_result=ToolResult(tool_call_id=call_id, output_json=output_json, status=status),
    )
