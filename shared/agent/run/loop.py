"""One run of the agent loop: the model decides, tools run, the reply is persisted.

A run streams up to ``max_steps`` model calls (shared by a turn and its task
follow-ups). Inline tools run between steps, inside the run; task tools end the run
with status ``queued`` and continue on Cloud Tasks (``shared/tasks/handler.py``).

Everything the run does becomes an event; ``Transcript`` folds each one into the
message, which the throttled writer persists and the client is sent, with the same id
either way. However the loop ends, ``RunEnd`` (``finish.py``) makes the final write and
frees the run's slot. A run receives a ``RunDeps`` bundle, never the service that
opened it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Protocol

from shared.agent.prompt.files import FileLoader, choose
from shared.agent.prompt.history import build_history, open_document_note, window
from shared.agent.run.calls import StepCalls
from shared.agent.run.deps import RunDeps
from shared.agent.run.finish import Ending, RunEnd
from shared.agent.run.runs import INTERRUPTED, put_message
from shared.agent.stream.events import (
    AgentEvent,
    ModeratedEvent,
    RunStartEvent,
    TextEvent,
    UsageEvent,
)
from shared.agent.stream.transcript import Emit, Frame, Transcript
from shared.errors import (
    INTERNAL_MESSAGE,
    NotFound,
    ProviderSilent,
    ReplyWithheld,
    RunEnded,
    RunInterrupted,
    RunStopped,
    SparkError,
    TurnModerated,
)
from shared.ids import derived
from shared.llm.base import (
    Finish,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ToolCallRequest,
    finished,
)
from shared.observe import tracing
from shared.schemas.documents import ActiveRun, Conversation, StepState
from shared.store.limits import CLOSING_RESERVE
from shared.throttle import ThrottledWriter

log = logging.getLogger(__name__)


class FirstRequest(Protocol):
    """A run's first model request, sent before the run was opened (a head start,
    ``sending/head_start.py``): the run takes its stream only for the very request it
    would send itself."""

    @property
    def request(self) -> ModelRequest: ...

    @property
    def guess(self) -> Conversation | None: ...

    def take(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None] | None: ...

    async def discard(self) -> None: ...


STEP_LIMIT_NOTE = (
    "\n\n(Spark AI Agent stopped after the most steps allowed for one reply. "
    "Ask me to carry on if there is more to do.)"
)


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
        head_start: FirstRequest | None = None,
    ) -> None:
        assert record.message is not None
        self.deps = deps
        self.user_id = user_id
        self.conversation = conversation
        self.record = record
        self.steps_before = steps_before
        # The first model request, sent before the run was opened (``sending/head_start.py``).
        self.head_start = head_start
        self.transcript = Transcript(record.message)
        self.regenerates = record.message.regenerates
        self._files = FileLoader(deps.files)
        self._emit: Emit = ignore
        self._writer: ThrottledWriter | None = None
        self._end: RunEnd | None = None
        self._work: asyncio.Task[Ending] | None = None
        self._ended: RunEnded | SparkError | None = None
        self._model_since: float | None = None
        self._calls = StepCalls(deps, user_id, conversation, self._record)
        self._step = 0
        # The streaming writes' commits, counted on the run's span (tracing on only).
        self._commits: tracing.Commits | None = None

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
        lease_until = self.deps.clock.now() + self.deps.limits.lease
        # Refused near the limit: the run ends, and its end fits. Counted on the run's
        # span, not a span each (``tracing.py`` says why).
        with tracing.counted(self._commits):
            await self.deps.store.mutate(
                self.user_id,
                self.conversation_id,
                lambda c: put_message(c, self.run_id, message, lease_until),
                reserve=CLOSING_RESERVE,
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
        failed), its ``RunEnd`` (``finish.py``) saves the message with what was
        streamed, every tool call in it has a result, and the last frame is ``done`` or
        ``error``. The run is one span (its model calls, tool calls, writes and
        enqueued tasks are its children, but for its periodic streaming writes,
        counted on it), wherever it is produced.
        """
        with tracing.run(self.conversation_id, self.run_id) as span:
            traced = span.is_recording()
            self._commits = tracing.Commits() if traced else None
            try:
                await self._produce(emit)
            finally:
                if self._commits is not None:
                    self._commits.record(span)
            if self._end is not None and traced:
                tracing.run_ended(span, self._end.ending, self.transcript.message().usage)

    async def _produce(self, emit: Emit) -> None:
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
        end = self._end = RunEnd(
            self.deps,
            self.user_id,
            self.conversation_id,
            self.record,
            self.transcript,
            writer,
            emit,
            self._record,
        )
        self._work = asyncio.create_task(self._loop())
        watcher = asyncio.create_task(self._watch(writer))
        try:
            outcome: Ending | None = await self._work
        except asyncio.CancelledError:
            if self._ended is None:  # the process is shutting down, not a stop
                shutdown = SparkError(INTERRUPTED.message)
                await asyncio.shield(end.badly(shutdown, code=INTERRUPTED.code))
                await asyncio.shield(end.release())
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
            if self.head_start is not None:  # ended before its first model call
                await asyncio.shield(self.head_start.discard())
        if outcome is None:
            assert self._ended is not None
            await end.badly(self._ended)
        else:
            await end.well(outcome, self._calls.queued, self._calls.paused)
        await end.release()
        titles = self.deps.titles
        if titles is not None and end.saved is not None and end.ending == "completed":
            # After the run: its done sent, its slot freed; only this coroutine waits.
            await titles.title(self.user_id, end.saved)

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
                except NotFound:
                    self._interrupt(RunInterrupted("The conversation was deleted."))
                    return
                except SparkError:
                    continue
                if probe.run_id != self.run_id:
                    self._interrupt(RunInterrupted("The run was closed elsewhere."))
                    return
                if probe.status == "stopping":
                    self._interrupt(RunStopped("The reply was stopped."))
                    return

    async def _loop(self) -> Ending:
        steps = self._steps()
        for step in range(steps):
            self._step = step
            last = step == steps - 1
            try:
                calls = await self._model_step(offer_tools=not last)
            except TurnModerated as flagged:
                # The fixed, kind reply in place of the model's, which was never passed
                # on (the egress held it until the verdict).
                self._record(TextEvent(flagged.reply))
                self._record(ModeratedEvent("input", flagged.category))
                await self._flag(flagged.category, "input")
                return "complete"
            except ReplyWithheld as withheld:
                # What had streamed is replaced by a note; the run ends withheld.
                self._record(ModeratedEvent("output", withheld.category))
                await self._flag(withheld.category, "output")
                raise
            if not calls:
                return "complete"
            if last:
                # Tools were not offered on the last step; a model that still asks is stopped.
                self._record(TextEvent(STEP_LIMIT_NOTE))
                return "complete"
            self._calls.step_tasks = 0
            for index, call in enumerate(calls):
                await self._calls.take(self._own_id(call, index))
            if self._calls.paused:
                return "waiting"  # for the user; any tasks of this step run meanwhile
            if self._calls.queued:
                return "queued"
        return "complete"

    async def _flag(self, category: str, direction: str) -> None:
        """Tell the user's parents of the stop (a dependent's; the message names it)."""
        await self.deps.flags.flag(
            self.user_id, category, direction, self.conversation_id, self.message_id
        )

    def _own_id(self, call: ToolCallRequest, index: int) -> ToolCallRequest:
        """The call under an id of ours, unique in the conversation: providers may send
        none, or reuse one across turns, and two calls must never share a task or part."""
        own = derived("call", self.run_id, str(self._step), str(index))
        return ToolCallRequest(own, call.name, call.arguments)

    def _steps(self) -> int:
        return max(self.deps.limits.max_steps - self.steps_before, 1)

    async def first_request(self) -> ModelRequest:
        """The request of this run's first model call, as ``_model_step`` builds it (what
        a head start sends before the run is opened)."""
        return await self._request(offer_tools=self._steps() > 1)

    async def _request(self, offer_tools: bool) -> ModelRequest:
        deps = self.deps
        previous = list(self.conversation.messages)
        # A reply made again is there from its first step, empty: it hides the reply it
        # replaces (``history.to_chat``).
        if self.transcript.has_content or self.regenerates is not None:
            previous.append(self.transcript.message().model_copy(update={"status": "complete"}))
        limits = deps.limits
        archived = self.conversation.archived
        offset = archived.count if archived is not None else 0
        seen = window(previous, limits.history_messages, offset, limits.history_step)
        shown = await self._files.load(choose(seen, limits.attachments))
        history = build_history(
            previous,
            limits.history_messages,
            limits.history_chars,
            provider=deps.provider,
            shown=shown,
            offset=offset,
            step=limits.history_step,
        )
        tools = deps.specs if offer_tools else ()
        system = deps.system_prompt + open_document_note(self.conversation.document_id)
        # One key per conversation: its requests share their prefix (OpenAI's cache key).
        key = derived("cache", self.user_id, self.conversation_id)
        return ModelRequest(system=system, messages=history, tools=tools, cache_key=key)

    async def _open_stream(self, offer_tools: bool) -> AsyncGenerator[ModelEvent, None]:
        """The model's reply to this step's request: the head start's, if it asked for
        exactly this (its request was built on the conversation as committed, or is the
        one built from it), else a new one."""
        head, self.head_start = self.head_start, None
        if head is not None and head.guess == self.conversation:
            taken = head.take(head.request)
            if taken is not None:
                return taken
        request = await self._request(offer_tools)
        if head is not None:
            taken = head.take(request)
            if taken is not None:
                return taken
            # Someone wrote to the conversation meanwhile: ask again on what is stored.
            await head.discard()
        return await self.deps.model.chat(self.user_id, request)

    async def _model_step(self, offer_tools: bool) -> list[ToolCallRequest]:
        deps = self.deps
        finish: Finish | None = None
        calls: list[ToolCallRequest] = []
        clock = deps.clock
        replies = await self._open_stream(offer_tools)
        self._model_since = clock.monotonic()
        try:
            async with contextlib.aclosing(replies) as stream:
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
            self._record(
                UsageEvent(
                    usage.input_tokens,
                    usage.output_tokens,
                    finish.reason,
                    state,
                    cached_input_tokens=usage.cached_input_tokens,
                )
            )
        finished(finish, "This reply")
        return calls
