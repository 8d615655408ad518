"""Pure changes to a conversation document made by runs (used inside ``mutate``).

A run is a durable record, ``activeRun``, in the conversation document: its id, status,
lease and the in-flight message. Any instance can read it, stream it (``resume.py``),
stop it, or close it when its producer died. Each function here returns a new
``Conversation`` built with ``model_copy`` (so the store writes only what changed) and
may run more than once, so none has side effects.

How a run moves::

    queued ──claim──▶ streaming ──stop──▶ stopping
       │                 │                   │
       └─────────────────┴───────────────────┴──▶ released: its message is appended
                                                  to ``messages`` and the next queued
                                                  user message (if any) opens its run
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from shared.agent.stream.events import DoneEvent, ErrorEvent
from shared.agent.stream.transcript import Transcript, shrink
from shared.agent.waiting.results import (
    cancel_calls,
    follow_documents,
    follow_up_id,
    follow_up_run_id,
    supersede_pending,
)
from shared.errors import (
    NoActiveRun,
    RateLimited,
    RequestError,
    RunInProgress,
    RunInterrupted,
    RunStopped,
)
from shared.ids import derived
from shared.schemas.documents import (
    ActiveRun,
    Conversation,
    Message,
    MessageError,
    TaskState,
)
from shared.store.patch import stored_size

INTERRUPTED = MessageError(
    code="run_interrupted",
    message="Spark AI Agent stopped before finishing this reply. Please try again.",
)
STOPPED_WAITING = "The user stopped the reply before answering this."
BUSY = (
    "Spark AI Agent is still replying in this conversation; "
    "wait for it to finish (or stop it), then send your message."
)
# A full queue frees a place when the live run ends: about one reply's time.
QUEUE_RETRY_SECONDS = 30
# Finished entries the ``tasks`` map keeps (the newest), as the ledger keeps its finished
# records: unbounded, a long conversation's map grew with every task call, taking room
# in the live document that its messages need.
KEEP_FINISHED_TASKS = 50
FINISHED_TASKS = ("completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """How many messages may wait behind a live run, and the bytes they may take
    together (as stored); ``Settings`` gives the values."""

    messages: int
    bytes: int


def placeholder(run: ActiveRun, model: str | None = None) -> Message:
    """The empty assistant message a run starts from."""
    return Message(
        id=run.assistant_message_id,
        role="assistant",
        created_at=run.started_at,
        status="streaming",
        content=[],
        run_id=run.run_id,
        model=model,
    )


def new_run(
    run_id: str,
    message_id: str,
    now: datetime,
    lease_until: datetime,
    user_message_id: str | None,
    status: Literal["queued", "streaming"] = "streaming",
    model: str | None = None,
) -> ActiveRun:
    """A run record holding its empty in-flight message."""
    run = ActiveRun(
        run_id=run_id,
        status=status,
        assistant_message_id=message_id,
        user_message_id=user_message_id,
        started_at=now,
        lease_expires_at=lease_until,
    )
    return run.model_copy(update={"message": placeholder(run, model)})


def queued_run(user_message: Message, now: datetime, lease_until: datetime) -> ActiveRun:
    """The run that answers a queued user message (ids derived from it: reopening it
    after a crash finds the same run)."""
    return new_run(
        derived("run", user_message.id, "run"),
        derived("msg", user_message.id, "reply"),
        now,
        lease_until,
        user_message.id,
        status="queued",
    )


def follow_up_run(
    source_id: str, now: datetime, lease_until: datetime, *, queued: bool, model: str | None
) -> ActiveRun:
    """The run that continues the agent after the results of ``source_id``'s calls (ids
    derived from it: every delivery of those results finds the same run)."""
    return new_run(
        follow_up_run_id(source_id),
        follow_up_id(source_id),
        now,
        lease_until,
        None,
        status="queued" if queued else "streaming",
        model=None if queued else model,
    )


def _pruned(tasks: dict[str, TaskState]) -> dict[str, TaskState]:
    """``tasks`` without its oldest finished entries past ``KEEP_FINISHED_TASKS``; an
    entry still queued, running or waiting on the user is always kept."""
    finished = sorted(
        (state.updated_at, task_id)
        for task_id, state in tasks.items()
        if state.status in FINISHED_TASKS
    )
    drop = {task_id for _, task_id in finished[: max(len(finished) - KEEP_FINISHED_TASKS, 0)]}
    return {k: v for k, v in tasks.items() if k not in drop} if drop else tasks


def _released(
    conversation: Conversation,
    message: Message,
    now: datetime,
    lease_until: datetime,
    tasks: dict[str, TaskState] | None = None,
) -> Conversation:
    """Append the run's finished message, clear the run, and open the run of the next
    queued user message, if there is one (so nothing can slip in between)."""
    if tasks:
        conversation = conversation.model_copy(
            update={"tasks": _pruned({**(conversation.tasks or {}), **tasks})}
        )
    conversation = follow_documents(conversation, message)
    conversation = conversation.model_copy(update={"messages": [*conversation.messages, message]})
    queue = list(conversation.queued_messages or [])
    active: ActiveRun | None = None
    if queue:
        nxt = queue.pop(0)
        active = queued_run(nxt, now, lease_until)
        # The next message supersedes calls of the finished one still waiting on the user.
        conversation = supersede_pending(conversation, now)
        conversation = with_user_message(conversation, nxt)
    return conversation.model_copy(
        update={
            "active_run": active,
            "queued_messages": queue or None,
            "updated_at": now,
            "last_message_at": now,
        }
    )


def _closed(
    run: ActiveRun,
    outcome: Literal["stopped", "interrupted"],
    error: MessageError = INTERRUPTED,
) -> Message:
    """The run's message as far as it got, ended by someone other than its producer
    (through the same reducer as a live run, so the two end alike)."""
    transcript = Transcript(run.message or placeholder(run))
    for event in transcript.closing_events("stopped" if outcome == "stopped" else "error"):
        transcript.apply(event)
    if outcome == "stopped":
        transcript.apply(DoneEvent(run.assistant_message_id, "stopped"))
    else:
        transcript.apply(ErrorEvent(error.message, error.code))
    return transcript.message()


def abandon_run(
    conversation: Conversation,
    run_id: str,
    error: MessageError,
    now: datetime,
    lease_until: datetime,
    *,
    queued_only: bool = False,
) -> Conversation:
    """End a run that could not be started (its task could not be queued) as an error,
    which its message shows; the next queued message opens, queued. With
    ``queued_only``, a queued run refused admission for good (today's tokens are
    spent): one that is not queued any more is left alone."""
    run = conversation.active_run
    if run is None or run.run_id != run_id or (queued_only and run.status != "queued"):
        return conversation
    return _released(conversation, _closed(run, "interrupted", error), now, lease_until)


def close_stale_run(
    conversation: Conversation, now: datetime, lease_until: datetime, *, cut: bool = False
) -> Conversation:
    """End a run whose lease has lapsed (its producer died): its message keeps its text,
    ends as an error (``run_interrupted``), and every open tool call gets a result. A
    ``stopping`` run ends ``stopped``; a ``queued`` one is left to be produced."""
    run = conversation.active_run
    # A queued run has no producer yet, so none can have died: its watchdog produces it.
    if run is None or run.lease_expires_at > now or run.status == "queued":
        return conversation
    outcome: Literal["stopped", "interrupted"] = (
        "stopped" if run.status == "stopping" else "interrupted"
    )
    closed = _closed(run, outcome)
    # ``cut``: the document is full; what the dead run streamed is dropped, with a note.
    return _released(conversation, shrink(closed, 0) if cut else closed, now, lease_until)


def check_queue(queue: list[Message], message: Message, limits: QueueLimits) -> None:
    """Refuse ``message`` if the queue has no room for it (by count or by bytes).

    Raises:
        RateLimited: with the reason and when to try again.
    """
    if len(queue) >= limits.messages:
        raise RateLimited(
            f"{len(queue)} messages are already waiting for Spark AI Agent in this "
            "conversation; wait for a reply, then send this one.",
            QUEUE_RETRY_SECONDS,
            limit="queued_messages",
        )
    taken = sum(stored_size(m.to_firestore()) for m in (*queue, message))
    if taken > limits.bytes:
        raise RateLimited(
            f"The messages waiting for Spark AI Agent in this conversation may take "
            f"{limits.bytes // 1024} KB together, and this one would not fit; wait for a "
            "reply, then send it.",
            QUEUE_RETRY_SECONDS,
            limit="queued_bytes",
        )


def open_run(
    conversation: Conversation,
    user_message: Message,
    run: ActiveRun,
    when_busy: Literal["reject", "queue"] = "reject",
    queue: QueueLimits | None = None,
) -> Conversation:
    """Append the user's message and make ``run`` active; or, when another run is live
    and ``when_busy`` is ``queue``, keep the message in the queue (every tab sees it),
    within ``queue``'s limits.

    A run whose producer died must be closed first (``close_stale_run``, its own
    write): a change that raises writes nothing, so it cannot close and refuse at once.

    Raises:
        RunInProgress: another run is active and ``when_busy`` is ``reject``.
        RateLimited: the queue is full (by count or by bytes); nothing was written.
    """
    now = run.started_at
    if conversation.active_run is not None:
        if when_busy == "reject":
            raise RunInProgress(BUSY)
        if queue is not None:
            check_queue(conversation.queued_messages or [], user_message, queue)
        return conversation.model_copy(
            update={
                "queued_messages": [*(conversation.queued_messages or []), user_message],
                "updated_at": now,
                "last_message_at": now,
            }
        )
    # Calls still waiting for the user are closed first: the user has moved on.
    conversation = supersede_pending(conversation, now)
    return with_user_message(conversation, user_message).model_copy(
        update={"active_run": run, "updated_at": now, "last_message_at": now}
    )


def with_user_message(conversation: Conversation, message: Message) -> Conversation:
    """``message`` appended to ``messages``; the lesson it names (if any) becomes the
    conversation's document."""
    update: dict[str, Any] = {"messages": [*conversation.messages, message]}
    if message.document_id is not None and message.document_id != conversation.document_id:
        update["document_id"] = message.document_id
    return conversation.model_copy(update=update)


def with_run(conversation: Conversation, run: ActiveRun, update: dict[str, Any]) -> Conversation:
    """``conversation`` whose active run is ``run`` changed by ``update``."""
    return conversation.model_copy(update={"active_run": run.model_copy(update=update)})


def _ours(conversation: Conversation, run_id: str) -> ActiveRun:
    run = conversation.active_run
    if run is None or run.run_id != run_id or run.status == "queued":
        raise RunInterrupted(INTERRUPTED.message)
    return run


def put_message(
    conversation: Conversation, run_id: str, message: Message, lease_until: datetime
) -> Conversation:
    """Store the in-flight message's newer state and extend the run's lease: a write of
    ``activeRun`` alone, whatever the conversation's length.

    Raises:
        RunInterrupted: the run is no longer this one (closed as dead, or taken over).
        RunStopped: its owner asked it to stop.
    """
    run = _ours(conversation, run_id)
    if run.status == "stopping":
        raise RunStopped("The reply was stopped.")
    return with_run(conversation, run, {"message": message, "lease_expires_at": lease_until})


def finish_run(
    conversation: Conversation,
    run_id: str,
    message: Message,
    now: datetime,
    lease_until: datetime,
    tasks: dict[str, TaskState] | None = None,
) -> Conversation:
    """Append the finished message, add the tasks it queued, and release the run.

    Raises:
        RunInterrupted: as for ``put_message``.
        RunStopped: a stop was asked while it finished; it must end as ``stopped``.
    """
    run = _ours(conversation, run_id)
    if run.status == "stopping" and message.status not in ("stopped", "error"):
        raise RunStopped("The reply was stopped.")
    return _released(conversation, message, now, lease_until, tasks)


def request_stop(conversation: Conversation, now: datetime, lease_until: datetime) -> Conversation:
    """Ask the active run to stop. A run nobody produces (queued, or its producer dead)
    is closed at once as ``stopped``; a live one is marked ``stopping`` and its producer
    ends it. Task calls of the conversation that have not started are cancelled, those
    running will not be followed up, and calls waiting for the user are closed.

    Raises:
        NoActiveRun: nothing is running or waiting to run in this conversation.
    """
    run = conversation.active_run
    pending = _pending_tasks(conversation)
    waiting = supersede_pending(conversation, now, STOPPED_WAITING)
    if run is None and not pending and waiting is conversation:
        raise NoActiveRun("Nothing is running in this conversation.")
    conversation = _stop_tasks(waiting, pending, now)
    if run is None:
        return conversation
    if run.status == "queued" or run.lease_expires_at <= now:
        return _released(conversation, _closed(run, "stopped"), now, lease_until)
    if run.status == "stopping":
        return conversation
    run = run.model_copy(update={"status": "stopping", "stop_requested_at": now})
    return conversation.model_copy(update={"active_run": run, "updated_at": now})


def _pending_tasks(conversation: Conversation) -> dict[str, TaskState]:
    return {
        task_id: state
        for task_id, state in (conversation.tasks or {}).items()
        if state.status in ("queued", "running") and state.follow_up is not False
    }


def _stop_tasks(
    conversation: Conversation, pending: dict[str, TaskState], now: datetime
) -> Conversation:
    if not pending:
        return conversation
    tasks = dict(conversation.tasks or {})
    cancel: list[str] = []
    for task_id, state in pending.items():
        if state.status == "queued":
            cancel.append(state.tool_call_id)
        else:
            tasks[task_id] = state.model_copy(update={"follow_up": False, "updated_at": now})
    conversation = conversation.model_copy(update={"tasks": tasks})
    return cancel_calls(conversation, cancel, now)


NOT_LAST_REPLY = (
    "Only the conversation's last reply can be made again, once it has finished; "
    "this messageId names another message."
)


def answered_turn(conversation: Conversation, message_id: str) -> Message:
    """The user message whose reply ``message_id`` is, when ``message_id`` is the
    conversation's last finished reply (what a regenerate may replace).

    Raises:
        RequestError: ``message_id`` is not the last message, not a finished reply of
            Spark AI Agent's, or answers no user message.
    """
    messages = conversation.messages
    last = messages[-1] if messages else None
    if last is None or last.id != message_id or last.role != "assistant":
        raise RequestError(NOT_LAST_REPLY)
    if last.status == "streaming":
        raise RequestError(NOT_LAST_REPLY)
    for message in reversed(messages):
        if message.role == "user":
            return message
    raise RequestError(NOT_LAST_REPLY)


def regenerate_run(conversation: Conversation, message_id: str, run: ActiveRun) -> Conversation:
    """Make ``run`` active to answer again the user turn that the last reply,
    ``message_id``, answered; nothing is removed (messages are append-only: the new
    reply, marked ``regenerates``, is appended after the old one when it ends).

    Raises:
        RunInProgress: another run is active (or waits its turn).
        RequestError: ``message_id`` is not the conversation's last finished reply.
    """
    if conversation.active_run is not None or conversation.queued_messages:
        raise RunInProgress(BUSY)
    turn = answered_turn(conversation, message_id)
    if run.user_message_id != turn.id:
        raise RequestError(NOT_LAST_REPLY)  # the conversation moved on since it was drafted
    now = run.started_at
    conversation = supersede_pending(conversation, now)
    return conversation.model_copy(
        update={"active_run": run, "updated_at": now, "last_message_at": now}
    )
