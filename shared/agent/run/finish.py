"""How a run ends: its final write, the work it hands over, and its slot freed.

``Run.execute`` (``loop.py``) produces the reply; however the loop ends (done, waiting,
queued, stopped, failed, shut down) it hands over to a ``RunEnd``, which closes the run
in the document (``runs.finish_run``), cutting the reply to fit when the document is
full, and frees the user's run slot in the same commit (``RunSlots.close_and_release``:
one commit where there were two, ``bench/stream_overhead.py`` (a)); submits and
dispatches its tasks, hands on to a queued successor and rolls old messages over. A
run whose final write did not land frees its slot on its own (``release``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Literal

from shared.agent.run.deps import RunDeps
from shared.agent.run.runs import INTERRUPTED, finish_run
from shared.agent.run.slot import RunSlot
from shared.agent.stream.events import AgentEvent, DoneEvent, ErrorEvent
from shared.agent.stream.transcript import Cursor, Emit, Frame, Transcript, shrink
from shared.errors import (
    ConversationTooLarge,
    NotFound,
    RateLimited,
    RunEnded,
    RunInterrupted,
    RunStopped,
    SparkError,
)
from shared.ids import task_id_for
from shared.observe import setup as observe
from shared.observe.metrics import Ending as RunEnding
from shared.schemas.documents import ActiveRun, Conversation, Message, TaskState
from shared.schemas.server import TaskRecord
from shared.store.archive import roll_over
from shared.store.limits import CLOSING_RESERVE
from shared.throttle import ThrottledWriter
from shared.tools.base import ParsedCall

log = logging.getLogger(__name__)

Ending = Literal["complete", "queued", "waiting"]
"""How a run whose loop finished ends: replied (``complete``), its tasks carry on
(``queued``), or a person is asked (``waiting``)."""

UNSAVED = "Your reply could not be saved; please try again."
NOT_STARTED = "Spark AI Agent could not start the background work; please try again."


# Characters of each text part kept when a reply is cut to fit the document.
_CUT_TO = (20_000, 2_000, 0)


class RunEnd:
    """The end of one run, once its loop is over.

    ``record`` folds an event into the run's message, sends it and marks the message
    for saving (``Run``'s own); ``emit`` only sends a frame.
    """

    def __init__(
        self,
        deps: RunDeps,
        user_id: str,
        conversation_id: str,
        run: ActiveRun,
        transcript: Transcript,
        writer: ThrottledWriter,
        emit: Emit,
        record: Callable[[AgentEvent], None],
    ) -> None:
        self.deps = deps
        self.user_id = user_id
        self.conversation_id = conversation_id
        self.run_id = run.run_id
        self.message_id = run.assistant_message_id
        self.transcript = transcript
        self._writer = writer
        self._emit = emit
        self._record = record
        # How the run ended, for its metrics and span (``badly`` says otherwise).
        self.ending: RunEnding = "completed"
        self._began = deps.clock.monotonic()
        self._released = False  # the slot was freed with the final write
        # The conversation as the final write left it (``None``: none was made).
        self.saved: Conversation | None = None

    async def release(self) -> None:
        """Free the user's run slot; the run is counted by how it ended (every run's end
        passes here once). Its tokens were counted step by step, by the egress."""
        if (metrics := observe.process_metrics()) is not None:
            metrics.run_ended(self.ending, self.deps.clock.monotonic() - self._began)
        if not self._released:
            await self._slot().release()

    def _slot(self) -> RunSlot:
        return RunSlot(self.deps.slots, self.deps.tasks, self.user_id, self.run_id)

    def _tasks(
        self, queued: Sequence[ParsedCall], paused: Sequence[ParsedCall]
    ) -> dict[str, TaskState]:
        """What the conversation shows as going on: the tasks queued, and the calls
        waiting on the user."""
        now = self.deps.clock.now()
        work = [(p, "queued") for p in queued] + [(p, "waiting_on_user") for p in paused]
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
        lease_until = now + self.deps.limits.lease

        async def final() -> Conversation:
            # At the document's limit the reply is cut, with a note the user and the
            # model both read, until it fits: the run always closes. Only the reply cut
            # to its note may use the room kept for closing (one run's end never takes
            # more than a little of it); a longer one is new content.
            for keep in (None, *_CUT_TO):
                saving = message if keep is None else shrink(message, keep)

                def closing(c: Conversation | None, m: Message = saving) -> Conversation:
                    if c is None:
                        raise NotFound("No conversation with this id.")
                    return finish_run(c, self.run_id, m, now, lease_until, tasks)

                try:
                    closed = await self._slot().close(
                        self.conversation_id,
                        closing,
                        reserve=0 if keep == 0 else CLOSING_RESERVE,
                    )
                    self._released = True
                    return closed
                except ConversationTooLarge:
                    log.warning("run %s: reply too large to save; cutting it", self.run_id)
            raise ConversationTooLarge(
                "This conversation is full; please start a new one to carry on."
            )

        saved = self.saved = await self._writer.finish(final)
        successor = saved.active_run
        if successor is not None and successor.status == "queued":
            await self.deps.tasks.hand_on(self.user_id, self.conversation_id, successor)
        limits = self.deps.limits
        try:
            await roll_over(
                self.deps.store,
                self.user_id,
                saved,
                limits.live_doc_bytes,
                limits.history_messages,
                now,
            )
        except SparkError:
            # The next run's end tries again; the live document has room till then.
            log.warning("run %s: roll-over failed; it is retried later", self.run_id)

    async def well(
        self, outcome: Ending, queued: Sequence[ParsedCall], paused: Sequence[ParsedCall]
    ) -> None:
        """End the run as ``outcome``: its ``queued`` task calls handed to the ledger,
        its ``paused`` calls shown as waiting on the user."""
        granted: list[TaskRecord] = []
        if queued:
            calls = [(p.call.id, p.call.name, p.display_text) for p in queued]
            try:
                # Into the ledger before the message says "queued": a crash after this
                # leaves tasks that run (or are found gone), never a call no task runs.
                granted = await self.deps.tasks.submit(self.user_id, self.conversation_id, calls)
            except SparkError as exc:
                log.warning("run %s: could not queue its tasks: %s", self.run_id, exc)
                await self.badly(SparkError(NOT_STARTED), code=exc.code)
                return
        await self._expire_client_calls(paused)  # before the save: a crash after it is covered
        done = DoneEvent(self.message_id, outcome)
        frame = Frame(self.transcript.apply(done), done)
        try:
            await self._save_final(self._tasks(queued, paused) or None)
        except RunStopped:
            await self.badly(RunStopped("The reply was stopped."))
            # Its calls were closed as stopped: the tasks granted for them must not
            # hold a slot (or run) until their lease lapses. Not yet dispatched, so
            # none has started, and ``cancel`` frees them at once.
            if queued:
                ids = [task_id_for(self.conversation_id, p.call.id) for p in queued]
                try:
                    await self.deps.tasks.cancel(self.user_id, ids)
                except SparkError:
                    log.warning("run %s: its tasks wait for their lease", self.run_id)
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

    async def _expire_client_calls(self, paused: Sequence[ParsedCall]) -> None:
        client_calls = [p.call.id for p in paused if p.tool.execution == "client"]
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

    async def badly(self, reason: RunEnded | SparkError, code: str | None = None) -> None:
        """End the run as stopped or failed, keeping what was streamed."""
        self.ending = _ending(reason, code)
        if isinstance(reason, RunInterrupted):
            # Someone else closed the run; there is nothing of ours left to save.
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


def _ending(reason: RunEnded | SparkError, code: str | None) -> RunEnding:
    """How a run that ended badly for ``reason`` is counted."""
    if isinstance(reason, RunInterrupted) or code == INTERRUPTED.code:
        return "interrupted"  # closed elsewhere, or its process shut down
    if isinstance(reason, RunStopped):
        return "stopped"
    return "rate_limited" if isinstance(reason, RateLimited) else "failed"
