"""The projection back: a stored message turned into the events of its run.

``replay`` gives the same events, with the same ids, that ``Transcript.apply`` gave
while the run was live (``shared/agent/stream/transcript.py``), from any cursor, so another
instance can resume a client where it left off. It reads only the message, so any
instance can compute it from the document.
"""

from __future__ import annotations

import json
from typing import TypeVar

from shared.agent.stream.events import (
    ApprovalRequiredEvent,
    DoneEvent,
    DoneStatus,
    ErrorEvent,
    QuestionEvent,
    RunStartEvent,
    TaskQueuedEvent,
    TextEvent,
    ToolEndEvent,
    ToolStartEvent,
)
from shared.agent.stream.transcript import END, Cursor, Frame, Position, args_of
from shared.ids import task_id_for
from shared.schemas.documents import Message, MessageError, ToolCall, ToolResult

Opening = TypeVar("Opening", ToolStartEvent, ApprovalRequiredEvent)


def _opening(kind: type[Opening], call: ToolCall) -> Opening:
    """The event of ``kind`` that opened ``call`` (the two take the same fields)."""
    return kind(
        call.id,
        call.name,
        args_of(call.args_json),
        call.display_text,
        args_json=call.args_json,
        execution=call.execution,
    )


def _paused_event(call: ToolCall) -> QuestionEvent | ApprovalRequiredEvent | ToolStartEvent | None:
    """The event that paused the run for ``call``, if it was a question or an approval
    still waiting; once answered or decided, a plain ``tool_start``, so a prompt never
    comes back after a reload."""
    if (call.execution == "question" and call.status != "pending") or (
        call.approval and call.status != "awaiting_approval"
    ):
        return _opening(ToolStartEvent, call)
    if call.execution == "question":
        args = args_of(call.args_json)
        questions = args.get("questions")
        return QuestionEvent(
            call.id,
            questions if isinstance(questions, list) else [],
            tool=call.name,
            args_json=call.args_json,
            display_text=call.display_text,
        )
    if call.approval:
        return _opening(ApprovalRequiredEvent, call)
    return None


def _done_status(message: Message) -> DoneStatus:
    if message.status == "stopped":
        return "stopped"
    if message.status == "waiting":
        return "waiting"
    if any(p.tool_call is not None and p.tool_call.execution == "task" for p in message.content):
        return "queued"
    return "complete"


def tool_end(
    call: ToolCall | None, result: ToolResult, description: str | None = None
) -> ToolEndEvent:
    """The event that ended ``call`` with ``result``, as the run sent it."""
    cancelled = call is not None and call.status == "cancelled"
    ok = result.status == "ok"
    error = None
    if not ok:
        try:
            detail = json.loads(result.output_json)
            error = str(detail.get("error")) if isinstance(detail, dict) else None
        except json.JSONDecodeError:
            error = None
        error = error or "The tool failed."
    return ToolEndEvent(
        result.tool_call_id,
        "success" if ok else "error",
        error=error,
        document_id=result.document_id,
        version=result.document_version,
        output_json=result.output_json,
        call_status="cancelled" if cancelled else None,
        description=description,
    )


def replay(
    message: Message,
    conversation_id: str,
    user_message_id: str | None,
    after: Cursor | None = None,
) -> list[Frame]:
    """The frames of ``message``'s run that come after ``after`` (all of them if ``None``).

    A text part the client has only partly seen is sent from where it stopped, so the
    text received before and after a reconnect joins up exactly. The terminal frame is
    included once the message is no longer streaming.
    """
    assert message.run_id is not None
    run_id = message.run_id
    at = after.at if after is not None else None
    if at == END:
        return []
    seen = at if isinstance(at, Position) else None
    frames: list[Frame] = []
    if seen is None:
        start = RunStartEvent(run_id, conversation_id, user_message_id, message.id)
        frames.append(Frame(Cursor.event_id(run_id, 0, 0), start))
    calls: dict[str, ToolCall] = {}
    for index, part in enumerate(message.content):
        parts = index + 1
        if part.type == "text":
            text = part.text or ""
            begin = 0
            if seen is not None and seen.parts == parts:
                begin = seen.chars
            elif seen is not None and seen.parts > parts:
                continue
            if begin < len(text):
                frame_id = Cursor.event_id(run_id, parts, len(text))
                frames.append(Frame(frame_id, TextEvent(text[begin:])))
            continue
        if seen is not None and seen.parts >= parts:
            if part.tool_call is not None:
                calls[part.tool_call.id] = part.tool_call
            continue
        frame_id = Cursor.event_id(run_id, parts, 0)
        if part.tool_call is not None:
            call = calls[part.tool_call.id] = part.tool_call
            paused = _paused_event(call)
            if paused is not None:
                frames.append(Frame(frame_id, paused))
            elif call.execution == "task":
                task = TaskQueuedEvent(
                    task_id_for(conversation_id, call.id),
                    call.id,
                    call.name,
                    call.display_text,
                    args_json=call.args_json,
                )
                frames.append(Frame(frame_id, task))
            else:
                frames.append(Frame(frame_id, _opening(ToolStartEvent, call)))
        elif part.tool_result is not None:
            result = part.tool_result
            ended = tool_end(calls.get(result.tool_call_id), result, part.description)
            frames.append(Frame(frame_id, ended))
    if message.status != "streaming":
        frames.append(Frame(Cursor.end_id(run_id), terminal_event(message)))
    return frames


def terminal_event(message: Message) -> DoneEvent | ErrorEvent:
    """How a finished message's run ended, as its last event."""
    if message.status == "error":
        error = message.error or MessageError(code="internal", message="The reply failed.")
        return ErrorEvent(error.message, error.code)
    return DoneEvent(message.id, _done_status(message))
