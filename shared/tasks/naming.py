"""Deterministic names: the same work always gets the same id, so redeliveries and
retries find what an earlier delivery did instead of doing it again."""

from __future__ import annotations

import hashlib


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:24]


def task_id_for(conversation_id: str, tool_call_id: str) -> str:
    """The task of one tool call in one conversation."""
    return "task_" + _digest(conversation_id, tool_call_id)


def attempt_name(task_id: str, attempt: int) -> str:
    """The Cloud Task of one attempt (Cloud Tasks keeps names for a while after use,
    so each attempt needs its own)."""
    return f"{task_id}-{attempt}"


def reply_name(run_id: str) -> str:
    return f"reply-{run_id}"


def follow_up_id(message_id: str) -> str:
    """The agent's follow-up to the task results of ``message_id``."""
    return "msg_" + _digest(message_id, "follow-up")
