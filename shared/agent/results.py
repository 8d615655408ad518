"""A result arrived: pure changes that record tool results in a conversation, and the
ids that let the agent continue from them (used inside ``mutate``; may run twice).

Task results come this way today; answers, approvals and client-executed tools will
too, so every kind of result resumes a run the same way: record it (once), then, when
every call of the message has its result, open the follow-up (``follow_up_id``).

Each change is idempotent: applying it to a conversation that already shows its
effect changes nothing, which is what makes redelivered tasks harmless.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal

from shared.ids import derived
from shared.schemas.documents import (
    ContentPart,
    Conversation,
    Message,
    TaskState,
    TaskStatus,
    ToolCall,
    ToolResult,
)
from shared.tasks.naming import task_id_for


def follow_up_id(message_id: str) -> str:
    """The agent's follow-up to the results of the calls in ``message_id``."""
    return derived("msg", message_id, "follow-up")


def follow_up_run_id(message_id: str) -> str:
    return derived("run", message_id, "follow-up")


def wants_follow_up(conversation: Conversation, message: Message) -> bool:
    """Every call of ``message`` has its result and nothing asked to leave it there: the
    run that made the calls ended normally and none of its tasks was stopped."""
    if message.status != "complete" or not all_answered(conversation, message):
        return False
    tasks = conversation.tasks or {}
    for part in message.content:
        if part.tool_call is not None:
            state = tasks.get(task_id_for(conversation.id, part.tool_call.id))
            if state is not None and (state.follow_up is False or state.status == "cancelled"):
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


def _with_task_status(
    conversation: Conversation,
    task_ids: Iterable[str],
    status: TaskStatus,
    now: datetime,
    error: str | None = None,
) -> dict[str, TaskState] | None:
    tasks = dict(conversation.tasks or {})
    for task_id in task_ids:
        state = tasks.get(task_id)
        if state is not None:
            tasks[task_id] = state.model_copy(
                update={"status": status, "updated_at": now, "error": error}
            )
    return tasks or None


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
            "tasks": _with_task_status(conversation, [task_id], "running", now),
            "updated_at": now,
        }
    )


def result_message_id(tool_call_id: str) -> str:
    return derived("msg", tool_call_id, "result")


def cancel_calls(
    conversation: Conversation, call_ids: Sequence[str], now: datetime
) -> Conversation:
    """Give calls that will never run a "cancelled" result (so history stays whole), and
    show them and their tasks as cancelled."""
    output = json.dumps({"error": "Cancelled: the reply was stopped before this started."})
    recorded = record_results(conversation, dict.fromkeys(call_ids, output), "error", now)
    if recorded is conversation:
        return conversation
    task_ids = [task_id_for(conversation.id, call_id) for call_id in call_ids]
    return recorded.model_copy(
        update={
            "messages": _with_call_status(recorded, dict.fromkeys(call_ids, "cancelled")),
            "tasks": _with_task_status(recorded, task_ids, "cancelled", now, "Cancelled."),
        }
    )


def record_results(
    conversation: Conversation,
    outputs: Mapping[str, str],
    status: Literal["ok", "error"],
    now: datetime,
    task_error: str | None = None,
) -> Conversation:
    """Append a ``tool`` message with the results of calls that have none yet, and mark
    the calls and their tasks as finished."""
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
                tool_result=ToolResult(tool_call_id=call_id, output_json=output, status=status),
            )
            for call_id, output in pending.items()
        ],
    )
    call_status = "complete" if status == "ok" else "error"
    task_ids = [task_id_for(conversation.id, call_id) for call_id in pending]
    updated = conversation.model_copy(
        update={"messages": _with_call_status(conversation, dict.fromkeys(pending, call_status))}
    )
    return updated.model_copy(
        update={
            "messages": [*updated.messages, message],
            "tasks": _with_task_status(
                conversation,
                task_ids,
                "completed" if status == "ok" else "failed",
                now,
                task_error,
            ),
            "updated_at": now,
            "last_message_at": now,
        }
    )
