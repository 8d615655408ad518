"""Pure changes to a conversation document made by a run (used inside ``mutate``).

Each function returns a new ``Conversation`` and may run more than once, so none
has side effects.
"""

from __future__ import annotations

from datetime import datetime

from shared.errors import RunInProgress, RunInterrupted
from shared.schemas.documents import ActiveRun, Conversation, Message, MessageError, TaskState

INTERRUPTED = MessageError(
    code="run_interrupted",
    message="Spark AI Agent stopped before finishing this reply. Please try again.",
)


def _replace(conversation: Conversation, message: Message) -> list[Message]:
    return [message if m.id == message.id else m for m in conversation.messages]


def _still_streaming(conversation: Conversation, message: Message) -> None:
    stored = conversation.message(message.id)
    if stored is None or stored.status != "streaming":
        raise RunInterrupted(INTERRUPTED.message)


def close_stale_run(conversation: Conversation, now: datetime) -> Conversation:
    """End a run whose lease has lapsed (its instance died): its message becomes an error."""
    run = conversation.active_run
    if run is None or run.lease_expires_at > now:
        return conversation
    messages = [
        m.model_copy(update={"status": "error", "error": INTERRUPTED})
        if m.id == run.assistant_message_id and m.status == "streaming"
        else m
        for m in conversation.messages
    ]
    return conversation.model_copy(
        update={"messages": messages, "active_run": None, "updated_at": now}
    )


def open_run(
    conversation: Conversation, user_message: Message, assistant: Message, run: ActiveRun
) -> Conversation:
    """Append the user's message and the assistant's placeholder; make ``run`` active.

    Raises:
        RunInProgress: another run holds a live lease on this conversation.
    """
    now = run.started_at
    conversation = close_stale_run(conversation, now)
    if conversation.active_run is not None:
        raise RunInProgress(
            "Spark AI Agent is still replying in this conversation; "
            "wait for it to finish, then send your message."
        )
    return conversation.model_copy(
        update={
            "messages": [*conversation.messages, user_message, assistant],
            "active_run": run,
            "updated_at": now,
            "last_message_at": now,
        }
    )


def put_message(
    conversation: Conversation, message: Message, lease_until: datetime
) -> Conversation:
    """Replace the streaming message with its newer state and extend the run's lease.

    Raises:
        RunInterrupted: the message is no longer ``streaming`` (its run was closed as
            stale), so this run must stop rather than report success.
    """
    _still_streaming(conversation, message)
    run = conversation.active_run
    if run is not None and run.assistant_message_id == message.id:
        run = run.model_copy(update={"lease_expires_at": lease_until})
    return conversation.model_copy(
        update={"messages": _replace(conversation, message), "active_run": run}
    )


def finish_run(
    conversation: Conversation,
    run_id: str,
    message: Message,
    now: datetime,
    tasks: dict[str, TaskState] | None = None,
) -> Conversation:
    """Write the message's final state, add the tasks it queued, and release the run.

    Raises:
        RunInterrupted: as for ``put_message``.
    """
    _still_streaming(conversation, message)
    messages = _replace(conversation, message)
    run = conversation.active_run
    if run is not None and run.run_id == run_id:
        run = None
    update: dict[str, object] = {
        "messages": messages,
        "active_run": run,
        "updated_at": now,
        "last_message_at": now,
    }
    if tasks:
        update["tasks"] = {**(conversation.tasks or {}), **tasks}
    return conversation.model_copy(update=update)


class AlreadyAnswered(Exception):
    """The follow-up this task would write exists already (a redelivery)."""


def open_follow_up(conversation: Conversation, assistant: Message, run: ActiveRun) -> Conversation:
    """Append the placeholder of the agent's follow-up to task results and make ``run`` active.

    Raises:
        AlreadyAnswered: a message with ``assistant.id`` exists.
        RunInProgress: another run is live; try again when it ends.
    """
    if conversation.message(assistant.id) is not None:
        raise AlreadyAnswered(assistant.id)
    conversation = close_stale_run(conversation, run.started_at)
    if conversation.active_run is not None:
        raise RunInProgress("Another reply is being written in this conversation.")
    return conversation.model_copy(
        update={
            "messages": [*conversation.messages, assistant],
            "active_run": run,
            "updated_at": run.started_at,
        }
    )


def claim_queued_run(
    conversation: Conversation, run_id: str, lease_until: datetime
) -> Conversation:
    """Mark the queued run (``202`` mode) as started, once.

    Raises:
        AlreadyAnswered: the run is not queued any more (another delivery took it,
            or it was closed).
    """
    run = conversation.active_run
    if run is None or run.run_id != run_id or run.status != "queued":
        raise AlreadyAnswered(run_id)
    run = run.model_copy(update={"status": "streaming", "lease_expires_at": lease_until})
    return conversation.model_copy(update={"active_run": run})
