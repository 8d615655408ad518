"""One run of the agent loop: the model decides, tools run, the reply is persisted.

A run streams up to ``max_steps`` model calls (shared by a turn and its task
follow-ups). Inline tools run between steps, inside the run; task tools end the run
with status ``queued`` and continue on Cloud Tasks (``shared/tasks/handler.py``).

Everything the run does becomes an event; ``Transcript`` folds each one into the
message, which the throttled writer persists and the client is sent, with the same id
either way. A run receives a ``RunDeps`` bundle, never the service that opened it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Literal

from shared.agent.archive import roll_over
from shared.agent.deps import RunDeps
from shared.agent.events import (
    AgentEvent,
    ApprovalRequiredEvent,
    DoneEvent,
    ErrorEvent,
    QuestionEvent,
    RunStartEvent,
    TaskQueuedEvent,
    TextEvent,
    ToolEndEvent,
    ToolStartEvent,
    UsageEvent,
)
from shared.agent.files import FileLoader, choose
from shared.agent.history import build_history, open_document_note
from shared.agent.runs import INTERRUPTED, finish_run, put_message
from shared.agent.throttle import ThrottledWriter
from shared.agent.transcript import Cursor, Frame, Transcript, args_of, shrink
from shared.errors import (
    INTERNAL_MESSAGE,
    ConversationTooLarge,
    ProviderSilent,
    RunEnded,
    RunInterrupted,
    RunStopped,
    SparkError,
    ToolError,
)
from shared.ids import derived
from shared.llm.base import (
    Finish,
    ModelRequest,
    TextDelta,
    ToolCallRequest,
    finished,
)
from shared.schemas.documents import ActiveRun, Conversation, StepState, TaskState
from shared.schemas.server import TaskRecord
from shared.store.limits import CLOSING_RESERVE
from shared.tasks.naming import task_id_for
from shared.tools.base import ParsedCall, ToolContext, dump_output, error_output

log = logging.getLogger(__name__)

Emit = Callable[[Frame], None]
Outcome = Literal["complete", "queued", "waiting"]

STEP_LIMIT_NOTE = (
    "\n\n(Spark AI Agent stopped after the most steps allowed for one reply. "
    "Ask me to carry on if there is more to do.)"
)
UNSAVED = "Your reply could not be saved; please try again."
NOT_STARTED = "Spark AI Agent could not start the background work; please try again."


# Characters of each text part kept when a reply is cut to fit the document.
_CUT_TO = (20_000, 2_000, 0)


def ignore(frame: Frame) -> None:
    """The emit of a run nobody listens to (task follow-ups, ``202`` replies)."""


class Run:
    """One run: the model's reply to one user message (or to tool results)."""

    def __init__(
        self,
        deps: RunDeps,
        user_id: str,
        conversation: Conversation,
        record: ActiveRun,
        steps_before: int = 0,
    ) -> None:
        assert record.message is not None
        self.deps = deps
        self.user_id = user_id
        self.conversation = conversation
        self.record = record
        self.steps_before = steps_before
        self.transcript = Transcript(record.message)
        self._files = FileLoader(deps.files)
        self._emit: Emit = ignore
        self._writer: ThrottledWriter | None = None
        self._work: asyncio.Task[Outcome] | None = None
        self._ended: RunEnded | SparkError | None = None
        self._model_since: float | None = None
        self._queued: list[ParsedCall] = []
        self._paused: list[ParsedCall] = []
        self._step = 0
        self._step_tasks = 0

    @property
    def conversation_id(self) -> str:
        return self.conversation.id

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def message_id(self) -> str:
        return self.record.assistant_message_id

    def _record(self, event: AgentEvent) -> None:
        """Fold ``event`` into the message, send it, and mark the message for saving."""
        self._emit(Frame(self.transcript.apply(event), event))
        if self._writer is not None:
            self._writer.touch()

    async def _put(self) -> None:
        message = self.transcript.message()
        lease_until = self.deps.clock.now() + timedelta(seconds=self.deps.limits.lease_seconds)
        await self.deps.store.mutate(
            self.user_id,
            self.conversation_id,
            lambda c: put_message(c, self.run_id, message, lease_until),
            reserve=CLOSING_RESERVE,  # refused near the limit: the run ends, and its end fits
        )

    def _interrupt(self, reason: RunEnded | SparkError) -> None:
        """End the work at once (a stop, a takeover, a silent model, a full document)."""
        if self._ended is None:
            self._ended = reason
        if self._work is not None and not self._work.done():
            self._work.cancel()

    async def execute(self, emit: Emit = ignore) -> None:
        """Run the loop and persist the reply; never raises except on cancellation.

        Frames go to ``emit`` as they happen. However the run ends (done, stopped,
        failed), the message is saved with what was streamed, every tool call in it has
        a result, and the last frame is ``done`` or ``error``.
        """
        self._emit = emit
        limits = self.deps.limits
        self._record(
            RunStartEvent(
                self.run_id, self.conversation_id, self.record.user_message_id, self.message_id
            )
        )
        writer = self._writer = ThrottledWriter(
            self._put, limits.throttle_seconds, self.deps.clock, on_fatal=self._interrupt
        )
        self._work = asyncio.create_task(self._loop())
        watcher = asyncio.create_task(self._watch(writer))
        try:
            outcome: Outcome | None = await self._work
        except asyncio.CancelledError:
            if self._ended is None:  # the process is shutting down, not a stop
                shutdown = SparkError(INTERRUPTED.message)
                await asyncio.shield(self._end_badly(shutdown, code=INTERRUPTED.code))
                await asyncio.shield(self._release())
                raise
            outcome = None
        except SparkError as exc:
            log.warning("run %s failed: %s (%s)", self.run_id, exc.code, exc.detail)
            self._ended = self._ended or exc
            outcome = None
        except Exception:
            log.exception("run %s failed unexpectedly", self.run_id)
            self._ended = self._ended or SparkError(INTERNAL_MESSAGE)
            outcome = None
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        if outcome is None:
            assert self._ended is not None
            await self._end_badly(self._ended)
        else:
            await self._end_well(outcome)
        await self._release()

    async def _release(self) -> None:
        """Free the user's run slot and count the tokens this run used."""
        usage = self.transcript.message().usage
        tokens = usage.input_tokens + usage.output_tokens if usage else 0
        await self.deps.tasks.release_run(self.user_id, self.run_id, tokens)

    async def _watch(self, writer: ThrottledWriter) -> None:
        """Renew the lease while nothing is written, notice a stop or a takeover within
        about ``poll_seconds``, and fail a model that has gone silent."""
        limits, clock = self.deps.limits, self.deps.clock
        renew_every = limits.lease_seconds / 3
        while True:
            await clock.sleep(limits.poll_seconds)
            now = clock.monotonic()
            since = self._model_since
            if since is not None and now - since > limits.provider_idle_seconds:
                self._interrupt(
                    ProviderSilent(
                        "The model stopped responding for "
                        f"{limits.provider_idle_seconds:.0f} seconds; please try again."
                    )
                )
                return
            if now - writer.last_write >= renew_every:
                writer.touch()
            elif now - writer.last_write >= limits.poll_seconds:
                try:
                    probe = await self.deps.store.probe(self.user_id, self.conversation_id)
                except SparkError:
                    continue
                if probe.run_id != self.run_id:
                    self._interrupt(RunInterrupted("The run was closed elsewhere."))
                    return
                if probe.status == "stopping":
                    self._interrupt(RunStopped("The reply was stopped."))
                    return

    async def _loop(self) -> Outcome:
        steps = max(self.deps.limits.max_steps - self.steps_before, 1)
        for step in range(steps):
            self._step = step
            last = step == steps - 1
            calls = await self._model_step(offer_tools=not last)
            if not calls:
                return "complete"
            if last:
                # Tools were not offered on the last step; a model that still asks is stopped.
                self._record(TextEvent(STEP_LIMIT_NOTE))
                return "complete"
            self._step_tasks = 0
            for index, call in enumerate(calls):
                await self._take_call(self._own_id(call, index))
            if self._paused:
                return "waiting"  # for the user; any tasks of this step run meanwhile
            if self._queued:
                return "queued"
        return "complete"

    def _own_id(self, call: ToolCallRequest, index: int) -> ToolCallRequest:
        """The call under an id of ours, unique in the conversation: providers may send
        none, or reuse one across turns, and two calls must never share a task or part."""
        own = derived("call", self.run_id, str(self._step), str(index))
        return ToolCallRequest(own, call.name, call.arguments)

    async def _model_step(self, offer_tools: bool) -> list[ToolCallRequest]:
        deps = self.deps
        previous = list(self.conversation.messages)
        if self.transcript.has_content:
            previous.append(self.transcript.message().model_copy(update={"status": "complete"}))
        limits = deps.limits
        window = previous[-limits.history_messages :]
        shown = await self._files.load(choose(window, limits.attachments))
        history = build_history(
            previous,
            limits.history_messages,
            limits.history_chars,
            provider=deps.model.provider,
            shown=shown,
        )
        tools = deps.tools.specs() if offer_tools else ()
        system = deps.system_prompt + open_document_note(self.conversation.document_id)
        request = ModelRequest(system=system, messages=history, tools=tools)
        finish: Finish | None = None
        calls: list[ToolCallRequest] = []
        clock = deps.clock
        self._model_since = clock.monotonic()
        try:
            async with contextlib.aclosing(deps.model.stream(request)) as stream:
                async for event in stream:
                    self._model_since = clock.monotonic()
                    if isinstance(event, TextDelta):
                        if event.text:
                            self._record(TextEvent(event.text))
                    elif isinstance(event, ToolCallRequest):
                        calls.append(event)
                    else:
                        finish = event
        finally:
            self._model_since = None
        if finish is not None:
            usage, kept = finish.usage, finish.state
            state = None
            if kept is not None:
                state = StepState(provider=kept.provider, step=self._step, data=kept.data)
            self._record(UsageEvent(usage.input_tokens, usage.output_tokens, finish.reason, state))
        finished(finish, "This reply")
        return calls

    async def _take_call(self, call: ToolCallRequest) -> None:
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
            self._record(
                ToolEndEvent(
                    call.id, "error", error=exc.message, output_json=error_output(exc.message)
                )
            )
            return
        args_json = parsed.args.model_dump_json()
        if parsed.tool.check is not None and parsed.tool.execution == "inline":
            checked = await self._check(parsed, args_json)
            if checked is None:
                return
            parsed, args_json = checked, checked.args.model_dump_json()
        if parsed.tool.execution in ("question", "client") or parsed.needs_approval:
            self._pause(parsed, args_json)
            return
        if parsed.tool.execution == "task":
            limit = self.deps.limits.task_calls_per_step
            if self._step_tasks >= limit:
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
                self._record(
                    ToolEndEvent(call.id, "error", error=why, output_json=error_output(why))
                )
                return
            self._step_tasks += 1
            self._queued.append(parsed)
            task_id = task_id_for(self.conversation_id, call.id)
            self._record(
                TaskQueuedEvent(
                    task_id, call.id, call.name, parsed.display_text, args_json=args_json
                )
            )
            return
        await self._run_inline(parsed, args_json)

    def _pause(self, parsed: ParsedCall, args_json: str) -> None:
        """Persist a call that waits for a person, and tell the client what it waits for."""
        call, tool = parsed.call, parsed.tool
        self._paused.append(parsed)
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
            why = f"The {call.name} tool failed unexpectedly; try another way."
        self._record(
            ToolStartEvent(
                call.id, call.name, args_of(args_json), parsed.display_text, args_json=args_json
            )
        )
        self._record(ToolEndEvent(call.id, "error", error=why, output_json=error_output(why)))
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
        limit = self.deps.limits.tool_output_chars
        try:
            result = await parsed.run(context)
            output = dump_output(result.value, limit)
        except ToolError as exc:
            self._record(
                ToolEndEvent(
                    call.id, "error", error=exc.message, output_json=error_output(exc.message)
                )
            )
            return
        except Exception:
            log.exception("inline tool %s failed", call.name)
            error = f"The {call.name} tool failed unexpectedly; try another way."
            self._record(
                ToolEndEvent(call.id, "error", error=error, output_json=error_output(error))
            )
            return
        change = result.change
        self._record(
            ToolEndEvent(
                call.id,
                "success",
                document_id=change.document_id if change else None,
                version=change.version if change else None,
                output_json=output,
            )
        )

    # -- ending ---------------------------------------------------------------------

    def _tasks(self) -> dict[str, TaskState]:
        """What the conversation shows as going on: the tasks queued, and the calls
        waiting on the user."""
        now = self.deps.clock.now()
        work = [(p, "queued") for p in self._queued] + [
            (p, "waiting_on_user") for p in self._paused
        ]
        return {
            task_id_for(self.conversation_id, p.call.id): TaskState.model_validate(
                {
                    "status": status,
                    "tool": p.call.name,
                    "tool_call_id": p.call.id,
                    "display_text": p.display_text,
                    "updated_at": now,
                }
            )
            for p, status in work
        }

    async def _save_final(self, tasks: dict[str, TaskState] | None = None) -> None:
        message = self.transcript.message()
        now = self.deps.clock.now()
        lease_until = now + timedelta(seconds=self.deps.limits.lease_seconds)
        assert self._writer is not None
        saved: list[Conversation] = []

        async def final() -> None:
            # At the document's limit the reply is cut, with a note the user and the
            # model both read, until it fits: the run always closes. Only the reply cut
            # to its note may use the room kept for closing (one run's end never takes
            # more than a little of it); a longer one is new content.
            for keep in (None, *_CUT_TO):
                saving = message if keep is None else shrink(message, keep)
                try:
                    saved[:] = [
                        await self.deps.store.mutate(
                            self.user_id,
                            self.conversation_id,
                            lambda c, m=saving: finish_run(  # type: ignore[misc]
                                c, self.run_id, m, now, lease_until, tasks
                            ),
                            reserve=0 if keep == 0 else CLOSING_RESERVE,
                        )
                    ]
                    return
                except ConversationTooLarge:
                    log.warning("run %s: reply too large to save; cutting it", self.run_id)
            raise ConversationTooLarge(
                "This conversation is full; please start a new one to carry on."
            )

        await self._writer.finish(final)
        successor = saved[0].active_run if saved else None
        if successor is not None and successor.status == "queued":
            await self.deps.tasks.hand_on(self.user_id, self.conversation_id, successor)
        if saved:
            limits = self.deps.limits
            try:
                await roll_over(
                    self.deps.store,
                    self.user_id,
                    saved[0],
                    limits.live_doc_bytes,
                    limits.history_messages,
                    now,
                )
            except SparkError:
                # The next run's end tries again; the live document has room till then.
                log.warning("run %s: roll-over failed; it is retried later", self.run_id)

    async def _end_well(self, outcome: Outcome) -> None:
        granted: list[TaskRecord] = []
        if self._queued:
            calls = [(p.call.id, p.call.name, p.display_text) for p in self._queued]
            try:
                # Into the ledger before the message says "queued": a crash after this
                # leaves tasks that run (or are found gone), never a call no task runs.
                granted = await self.deps.tasks.submit(self.user_id, self.conversation_id, calls)
            except SparkError as exc:
                log.warning("run %s: could not queue its tasks: %s", self.run_id, exc)
                await self._end_badly(SparkError(NOT_STARTED), code=exc.code)
                return
        await self._expire_client_calls()  # before the save: a crash after it is covered
        done = DoneEvent(self.message_id, outcome)
        frame = Frame(self.transcript.apply(done), done)
        try:
            await self._save_final(self._tasks() or None)
        except RunStopped:
            await self._end_badly(RunStopped("The reply was stopped."))
            return
        except Exception as exc:
            self._unsaved(exc)
            return
        self._emit(frame)
        if granted:
            try:
                await self.deps.tasks.dispatch(self.user_id, granted)
            except SparkError:
                # Their leases lapse and the run's watchdog grants them again.
                log.warning("run %s: could not dispatch its tasks yet", self.run_id)

    async def _expire_client_calls(self) -> None:
        client_calls = [p.call.id for p in self._paused if p.tool.execution == "client"]
        if not client_calls:
            return
        try:
            await self.deps.tasks.expire_client_calls(
                self.user_id,
                self.conversation_id,
                client_calls,
                self.deps.limits.client_tool_timeout_seconds,
            )
        except SparkError:
            # A new message still closes them (superseded); nothing waits for ever.
            log.warning("run %s: no timeout for its client calls", self.run_id)

    async def _end_badly(self, reason: RunEnded | SparkError, code: str | None = None) -> None:
        """End the run as stopped or failed, keeping what was streamed."""
        if isinstance(reason, RunInterrupted):
            # Someone else closed the run; there is nothing of ours left to save.
            if self._writer is not None:
                await self._writer.abandon()
            end = Cursor.end_id(self.run_id)
            self._emit(Frame(end, ErrorEvent(reason.message, reason.code)))
            return
        stopped = isinstance(reason, RunStopped)
        for event in self.transcript.closing_events("stopped" if stopped else "error"):
            self._record(event)
        terminal: DoneEvent | ErrorEvent = (
            DoneEvent(self.message_id, "stopped")
            if stopped
            else ErrorEvent(reason.message, code or reason.code)
        )
        frame = Frame(self.transcript.apply(terminal), terminal)
        try:
            await self._save_final()
        except Exception as exc:
            self._unsaved(exc)
            return
        self._emit(frame)

    def _unsaved(self, exc: Exception) -> None:
        # The message stays in ``activeRun`` until the run's watchdog closes it.
        log.warning("run %s: final write failed: %r", self.run_id, exc)
        code = exc.code if isinstance(exc, SparkError) else "internal"
        self._emit(Frame(Cursor.end_id(self.run_id), ErrorEvent(UNSAVED, code)))
