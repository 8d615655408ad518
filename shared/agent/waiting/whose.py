"""Who a call waits on: the one rule that says which person's part a tool call asks
for (an answer, a decision, the client's result), used wherever a person's result is
taken, checked or listed (``results.pending_call``, ``chat.waiting_for``, the audit).
"""

from __future__ import annotations

from typing import Literal

from shared.schemas.documents import ToolCall

PersonKind = Literal["question", "approval", "client"]
KIND_NAMES: dict[PersonKind, str] = {
    "question": "a question",
    "approval": "awaiting approval",
    "client": "a client tool",
}


def person_kind(call: ToolCall) -> PersonKind | None:
    """What a person gives ``call``: a decision (it needs approval, whatever runs it),
    an answer (``ask_user_question``), or the client's result (a client tool); ``None``
    for a call no person answers (it runs inline or on a task)."""
    if call.approval:
        return "approval"
    if call.execution == "question":
        return "question"
    if call.execution == "client":
        return "client"
    return None


def waiting_on_person(call: ToolCall) -> bool:
    """The call waits for a person (an answer, a decision, the client's result). An
    approved call no longer does: it is running, and its result will come."""
    kind = person_kind(call)
    if kind == "approval":
        return call.status == "awaiting_approval"
    return kind is not None and call.status == "pending"
