"""A task's question to its user: an ``ask_user_question`` call of its own that the
task waits on, answered through the answers route like any question (pure changes, as
in ``results.py``; each idempotent).
"""

from __future__ import annotations

import json
from datetime import datetime

from shared.agent.waiting.results import answered, find_call, record_results, with_task_status
from shared.ids import derived, task_id_for
from shared.schemas.documents import ContentPart, Conversation, Message, ToolCall, ToolResult
from shared.tools.people import QUESTION_TOOL


def question_call_id(task_call_id: str) -> str:
    """The ``ask_user_question`` call a task (of ``task_call_id``) puts to its user."""
    return derived("call", task_call_id, "question")


def task_question(conversation: Conversation, task_call_id: str) -> ToolCall | None:
    """The question the task of ``task_call_id`` asked, if it asked one."""
    found = find_call(conversation, question_call_id(task_call_id))
    return None if found is None else found[1]


def answer_of(conversation: Conversation, call_id: str) -> ToolResult | None:
    for message in conversation.messages:
        for part in message.content:
            if part.tool_result is not None and part.tool_result.tool_call_id == call_id:
                return part.tool_result
    return None


def ask_for_task(
    conversation: Conversation, task_call_id: str, args_json: str, now: datetime
) -> Conversation:
    """The task's question, as an ``ask_user_question`` call in a message of its own
    (``waiting``, answered through the answers route like any question), and the task
    shown waiting on the user. Asked once: a second change adds nothing."""
    if task_question(conversation, task_call_id) is not None:
        return conversation
    call = ToolCall(
        id=question_call_id(task_call_id),
        name=QUESTION_TOOL,
        args_json=args_json,
        display_text="Asking you a question",
        execution="question",
        status="pending",
        for_call=task_call_id,
    )
    message = Message(
        id=derived("msg", task_call_id, "question"),
        role="assistant",
        created_at=now,
        status="waiting",
        content=[ContentPart(type="tool_call", tool_call=call)],
    )
    task_id = task_id_for(conversation.id, task_call_id)
    return conversation.model_copy(
        update={
            "messages": [*conversation.messages, message],
            "tasks": with_task_status(conversation, [task_id], "waiting_on_user", now),
            "updated_at": now,
            "last_message_at": now,
        }
    )


def close_task_question(
    conversation: Conversation, task_call_id: str, now: datetime, why: str
) -> Conversation:
    """The task's question, still unanswered, closed with ``why`` (its task ended)."""
    question = task_question(conversation, task_call_id)
    if question is None or question.id in answered(conversation):
        return conversation
    return record_results(
        conversation,
        {question.id: json.dumps({"error": why})},
        "error",
        now,
        call_status="cancelled",
    )
