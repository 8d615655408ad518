"""A result arrived: pure changes that record tool results in a conversation, and the
ids that let the agent continue from them (used inside ``mutate``; may run twice). Every
kind of result resumes a run the same way (``continuation.py``): record it (once), then,
when every call of the message has its result, open the follow-up (``open_follow_up``).

Each change is idempotent: applying it to a conversation that already shows its
effect changes nothing, which is what makes redelivered tasks harmless.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal

from shared.agent.waiting.whose import KIND_NAMES, PersonKind, person_kind, waiting_on_person
from shared.errors import AlreadyAnswered, NotFound, RequestError, RunInProgress
from shared.ids import derived, task_id_for
from shared.schemas.documents import (
    ActiveRun,
    ContentPart,
    Conversation,
    Message,
    TaskState,
    TaskStatus,
    ToolCall,
    ToolCallStatus,
    ToolResult,
)
from shared.tools.base import DocumentChange


def follow_up_id(message_id: str) -> str:
    """The agent's follow-up to the results of the calls in ``message_id``."""
    return derived("msg", message_id, "follow-up")


def follow_up_run_id(message_id: str) -> str:
    return derived("run", message_id, "follow-up")


def wants_follow_up(conversation: Conversation, message: Message) -> bool:
    """Every call of ``message`` has its result and nothing asked to leave it there: the
    run that made the calls ended normally (or waiting on the user) and none of its
    calls was stopped or superseded."""
    if message.status not in ("complete", "waiting") or not all_answered(conversation, message):
        return False
    if any(p.tool_call is not None and p.tool_call.for_call for p in message.content):
        return False  # a task's question: its answer lets the task go on, not the agent
    tasks = conversation.tasks or {}
    for part in message.content:
        if part.tool_call is not None:
            if part.tool_call.status == "cancelled":
                return False  # stopped, or superseded by a new message
            state = tasks.get(task_id_for(conversation.id, part.tool_call.id))
            if state is not None and (
                state.follow_up is False
                # cancelled with the run (no follow-up) unless the user cancelled it alone
                or (state.status == "cancelled" and state.follow_up is not True)
            ):
                return False
    return True


def find_call(conversation: Conversation, tool_call_id: str) -> tuple[Message, ToolCall] | None:
    """The message holding the tool call, and the call."""
    for message in conversation.messages:
        for part in message.content:
            if part.tool_call is not None and part.tool_call.id == tool_call_id:
                return message, part.tool_call
    return None


def answered(conversation: Conversation) -> set[str]:
    """Ids of the tool calls that have a result."""
    return {
        part.tool_result.tool_call_id
        for message in conversation.messages
        for part in message.content
        if part.tool_result is not None
    }


def all_answered(conversation: Conversation, message: Message) -> bool:
    """Every tool call in ``message`` has its result."""
    done = answered(conversation)
    return all(p.tool_call.id in done for p in message.content if p.tool_call is not None)


def _with_call_status(
    conversation: Conversation, statuses: Mapping[str, str], only_from: set[str] | None = None
) -> list[Message]:
    messages = []
    for message in conversation.messages:
        if any(p.tool_call is not None and p.tool_call.id in statuses for p in message.content):
            content = []
            for part in message.content:
                call = part.tool_call
                if (
                    call is not None
                    and call.id in statuses
                    and (only_from is None or call.status in only_from)
                ):
                    call = call.model_copy(update={"status": statuses[call.id]})
                    part = part.model_copy(update={"tool_call": call})
                content.append(part)
            message = message.model_copy(update={"content": content})
        messages.append(message)
    return messages


def with_task_status(
    conversation: Conversation,
    task_ids: Iterable[str],
    status: TaskStatus,
    now: datetime,
    error: str | None = None,
    follow_up: bool | None = None,
) -> dict[str, TaskState] | None:
    changed: dict[str, object] = {"status": status, "updated_at": now, "error": error}
    if follow_up is not None:
        changed["follow_up"] = follow_up
    tasks = dict(conversation.tasks or {})
    for task_id in task_ids:
        state = tasks.get(task_id)
        if state is not None:
            tasks[task_id] = state.model_copy(update=changed)
    return tasks or None


def follow_documents(conversation: Conversation, message: Message) -> Conversation:
    """The conversation working on the last lesson ``message``'s tool results created
    or changed (a lesson just made is the one the user talks about next)."""
    latest = next(
        (
            part.tool_result.document_id
            for part in reversed(message.content)
            if part.tool_result is not None and part.tool_result.document_id is not None
        ),
        None,
    )
    if latest is None or latest == conversation.document_id:
        return conversation
    return conversation.model_copy(update={"document_id": latest})


def mark_running(conversation: Conversation, tool_call_id: str, now: datetime) -> Conversation:
    """Show the task as running (unless it already has its result)."""
    if tool_call_id in answered(conversation):
        return conversation
    task_id = task_id_for(conversation.id, tool_call_id)
    state = (conversation.tasks or {}).get(task_id)
    if state is not None and state.status == "running":
        return conversation
    return conversation.model_copy(
        update={
            "messages": _with_call_status(conversation, {tool_call_id: "running"}, {"queued"}),
            "tasks": with_task_status(conversation, [task_id], "running", now),
            "updated_at": now,
        }
    )


def result_message_id(tool_call_id: str) -> str:
    return derived("msg", tool_call_id, "result")


def cancel_calls(
    conversation: Conversation,
    call_ids: Sequence[str],
    now: datetime,
    why: str = "Cancelled: the reply was stopped before this started.",
) -> Conversation:
    """Give calls that will never run a result saying why (so history stays whole), and
    show them and their tasks as cancelled (no follow-up is written for them)."""
    return record_results(
        conversation,
        dict.fromkeys(call_ids, json.dumps({"error": why})),
        "error",
        now,
        task_error=why,
        call_status="cancelled",
        task_status="cancelled",
    )


CANCELLED_BY_USER = "Cancelled by the user."


def cancel_by_user(conversation: Conversation, tool_call_id: str, now: datetime) -> Conversation:
    """The user cancelled the call's task (before it started, or at its tool's next
    step): an error result the model sees, the task shown cancelled, and the follow-up
    wanted as for any result."""
    why = CANCELLED_BY_USER
    return record_results(
        conversation,
        {tool_call_id: json.dumps({"error": why})},
        "error",
        now,
        task_error=why,
        task_status="cancelled",
        follow_up=True,
    )


def record_results(
    conversation: Conversation,
    outputs: Mapping[str, str],
    status: Literal["ok", "error"],
    now: datetime,
    task_error: str | None = None,
    call_status: ToolCallStatus | None = None,
    task_status: TaskStatus | None = None,
    hidden: bool | None = None,
    changes: Mapping[str, DocumentChange] | None = None,
    follow_up: bool | None = None,
    descriptions: Mapping[str, str | None] | None = None,
) -> Conversation:
    """Append a ``tool`` message with the results of calls that have none yet, and mark
    the calls and their tasks as finished (``hidden``: clients do not show the result;
    ``changes``: the lesson each call created or changed; ``follow_up``: set on their
    tasks' entries, e.g. a cancelled task that still wants the agent's follow-up;
    ``descriptions``: what each result shows, in words)."""
    changes = changes or {}
    pending = {k: v for k, v in outputs.items() if k not in answered(conversation)}
    if not pending:
        return conversation
    first = next(iter(pending))
    message = Message(
        id=result_message_id(first),
        role="tool",
        created_at=now,
        status="complete",
        content=[
            ContentPart(
                type="tool_result",
                tool_result=ToolResult(
                    tool_call_id=call_id,
                    output_json=output,
                    status=status,
                    hidden=hidden,
                    document_id=change.document_id if change else None,
                    document_version=change.version if change else None,
                ),
                description=(descriptions or {}).get(call_id),
            )
            for call_id, output in pending.items()
            for change in [changes.get(call_id)]
        ],
    )
    call_status = call_status or ("complete" if status == "ok" else "error")
    task_ids = [task_id_for(conversation.id, call_id) for call_id in pending]
    updated = conversation.model_copy(
        update={"messages": _with_call_status(conversation, dict.fromkeys(pending, call_status))}
    )
    updated = follow_documents(updated, message)
    return updated.model_copy(
        update={
            "messages": [*updated.messages, message],
            "tasks": with_task_status(
                conversation,
                task_ids,
                task_status or ("completed" if status == "ok" else "failed"),
                now,
                task_error,
                follow_up,
            ),
            "updated_at": now,
            "last_message_at": now,
        }
    )


# -- people's results: answers, approvals, client tools --------------------------------

SUPERSEDED = "Superseded by a new message from the user before this was answered."


def pending_call(conversation: Conversation, call_id: str, kind: PersonKind) -> ToolCall:
    """The call a person's result is for, if it is still waiting for one of this kind.

    Raises:
        NotFound: no such call in this conversation.
        AlreadyAnswered: it has its result (or decision) already.
        RequestError: it is not that kind of call.
    """
    found = find_call(conversation, call_id)
    if found is None:
        # A call the live stream has sent may not be saved yet (writes are throttled):
        # while a reply is being written, an unknown call is "not yet", not "never".
        if conversation.active_run is not None:
            raise RunInProgress(
                "This tool call is not ready for its result yet: post it once the reply "
                "has ended (its stream says done)."
            )
        raise NotFound("No tool call with this id in this conversation.")
    call = found[1]
    if call.id in answered(conversation) or (call.approval and call.status != "awaiting_approval"):
        raise AlreadyAnswered("This tool call has been answered already.")
    if person_kind(call) != kind:
        raise RequestError(f"This tool call is not {KIND_NAMES[kind]}.")
    return call


def approve(conversation: Conversation, call_id: str, now: datetime) -> Conversation:
    """Record the owner's approval of a call: it is handed to a Cloud Task, which runs it
    once with its stored arguments. A second decision on the same call is refused.

    Raises:
        NotFound, AlreadyAnswered, RequestError: as ``pending_call``.
    """
    call = pending_call(conversation, call_id, "approval")
    task_id = task_id_for(conversation.id, call_id)
    tasks = dict(conversation.tasks or {})
    tasks[task_id] = TaskState(
        status="queued",
        tool=call.name,
        tool_call_id=call_id,
        display_text=call.display_text,
        updated_at=now,
    )
    return conversation.model_copy(
        update={
            "messages": _with_call_status(conversation, {call_id: "queued"}),
            "tasks": tasks,
            "updated_at": now,
        }
    )


def approved(call: ToolCall) -> bool:
    """A call that needs approval may run only once the owner has approved it."""
    return not call.approval or call.status in ("queued", "running")


def supersede_pending(
    conversation: Conversation, now: datetime, why: str = SUPERSEDED
) -> Conversation:
    """Close every call still waiting for a person with an error result: the user has
    moved on (or stopped). Every ``tool_call`` keeps its ``tool_result``, so no history
    breaks."""
    done = answered(conversation)
    waiting = [
        part.tool_call.id
        for message in conversation.messages
        if message.status == "waiting"
        for part in message.content
        if part.tool_call is not None
        and part.tool_call.id not in done
        and waiting_on_person(part.tool_call)
        and part.tool_call.for_call is None  # a task's question waits with its task
    ]
    if not waiting:
        return conversation
    return cancel_calls(conversation, waiting, now, why)


FollowUp = Literal["ours", "exists", "busy", "unwanted"]
"""What a follow-up's opening found: ``ours``, it is the active run, queued (opened
now, or by an earlier write and not claimed yet); ``exists``, its message is there
already; ``busy``, another run holds the conversation (or the follow-up runs already);
``unwanted``, not every call has its result, or something asked to leave them there
(``wants_follow_up``)."""


def open_follow_up(
    conversation: Conversation, source_id: str, run: ActiveRun
) -> tuple[Conversation, FollowUp]:
    """Make ``run`` (the follow-up to ``source_id``'s results) active when every call of
    that message has its result and the conversation is free; otherwise unchanged."""
    source = conversation.message(source_id)
    if source is None or not wants_follow_up(conversation, source):
        return conversation, "unwanted"
    if conversation.message(run.assistant_message_id) is not None:
        return conversation, "exists"
    active = conversation.active_run
    if active is not None:
        ours = active.run_id == run.run_id and active.status == "queued"
        return conversation, "ours" if ours else "busy"
    return conversation.model_copy(update={"active_run": run, "updated_at": run.started_at}), "ours"
