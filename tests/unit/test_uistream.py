"""The AI SDK's UI message stream, chunk by chunk, from a run's frames."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from shared.agent.stream.events import (
    ApprovalRequiredEvent,
    DoneEvent,
    ErrorEvent,
    RunStartEvent,
    TaskQueuedEvent,
    TextEvent,
    ToolEndEvent,
    ToolStartEvent,
)
from shared.agent.stream.sse import EventChannel, sse_stream
from shared.agent.stream.transcript import Cursor, Frame
from shared.agent.stream.uistream import DONE, UI, UiChunks, encode

RUN = "run_1"
ROOT = Path(__file__).resolve().parents[2]


def frame(event: object, parts: int = 0, chars: int = 0) -> Frame:
    return Frame(Cursor.event_id(RUN, parts, chars), event)  # type: ignore[arg-type]


def reply() -> list[Frame]:
    """A reply with text, an inline tool, more text, a task and an approval."""
    return [
        frame(RunStartEvent(RUN, "conv_1", "msg_u", "msg_a")),
        frame(TextEvent("Let me "), 1, 7),
        frame(TextEvent("look."), 1, 12),
        frame(ToolStartEvent("call_1", "read_lesson", {"lessonId": "l1"}, "Reading"), 2),
        frame(ToolEndEvent("call_1", "success", output_json='{"title": "Tides"}'), 2),
        frame(TextEvent("Done."), 3, 5),
        frame(TaskQueuedEvent("task_1", "call_2", "create_lesson", "Drafting", '{"t": 1}'), 4),
        frame(ApprovalRequiredEvent("call_3", "delete_lesson", {"lessonId": "l1"}, "Delete"), 5),
        Frame(Cursor.end_id(RUN), DoneEvent("msg_a", "waiting")),
    ]


def chunks_of(frames: list[Frame]) -> list[dict[str, object]]:
    state = UiChunks()
    return [c for f in frames for c in state.chunks(f)]


def test_a_reply_becomes_the_chunks_use_chat_reads() -> None:
    assert chunks_of(reply()) == [
        {"type": "start", "messageId": "msg_a"},
        {"type": "start-step"},
        {"type": "text-start", "id": "run_1-text-1"},
        {"type": "text-delta", "id": "run_1-text-1", "delta": "Let me "},
        {"type": "text-delta", "id": "run_1-text-1", "delta": "look."},
        {"type": "text-end", "id": "run_1-text-1"},
        {
            "type": "tool-input-available",
            "toolCallId": "call_1",
            "toolName": "read_lesson",
            "input": {"lessonId": "l1"},
        },
        {"type": "tool-output-available", "toolCallId": "call_1", "output": {"title": "Tides"}},
        # What follows the call is the next model call's: a step of its own.
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "run_1-text-3"},
        {"type": "text-delta", "id": "run_1-text-3", "delta": "Done."},
        {"type": "text-end", "id": "run_1-text-3"},
        {
            "type": "tool-input-available",
            "toolCallId": "call_2",
            "toolName": "create_lesson",
            "input": {"t": 1},
        },
        {
            "type": "data-task",
            "id": "task_1",
            "data": {
                "taskId": "task_1",
                "toolCallId": "call_2",
                "tool": "create_lesson",
                "status": "queued",
                "displayText": "Drafting",
            },
        },
        {
            "type": "tool-input-available",
            "toolCallId": "call_3",
            "toolName": "delete_lesson",
            "input": {"lessonId": "l1"},
        },
        {"type": "tool-approval-request", "approvalId": "call_3", "toolCallId": "call_3"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "tool-calls"},
    ]


def test_a_replayed_reply_names_its_parts_as_the_live_one_did() -> None:
    """A resumed stream replaces what a client shows: the same ids, never new ones."""
    live = chunks_of(reply())
    # A replay sends a text part whole, as one delta, with the same frame positions.
    replayed = [reply()[0], frame(TextEvent("Let me look."), 1, 12), *reply()[3:]]
    ids = {str(c.get("id")) for c in chunks_of(replayed) if "id" in c}
    assert ids == {str(c.get("id")) for c in live if "id" in c}


def test_a_failed_or_stopped_reply_ends_as_the_protocol_says() -> None:
    error = chunks_of([reply()[0], frame(TextEvent("Hi"), 1, 2), frame(ErrorEvent("Sorry", "x"))])
    assert error[-3:] == [
        {"type": "text-end", "id": "run_1-text-1"},
        {"type": "error", "errorText": "Sorry"},
        {"type": "finish", "finishReason": "error"},
    ]
    stopped = chunks_of([reply()[0], frame(DoneEvent("msg_a", "stopped"))])
    assert stopped[-3:] == [
        {"type": "finish-step"},
        {"type": "abort", "reason": "stopped"},
        {"type": "finish", "finishReason": "other"},
    ]


def test_a_tool_that_failed_says_why() -> None:
    failed = chunks_of([frame(ToolEndEvent("call_1", "error", error="Lesson not found"), 2)])
    assert failed == [
        {"type": "tool-output-error", "toolCallId": "call_1", "errorText": "Lesson not found"}
    ]


def test_each_chunk_is_one_data_line() -> None:
    encoded = encode({"type": "text-delta", "id": "t", "delta": "a\nb “c”"})
    assert encoded.startswith(b"data: ") and encoded.endswith(b"\n\n")
    assert encoded.count(b"\n") == 2
    assert json.loads(encoded[6:]) == {"type": "text-delta", "id": "t", "delta": "a\nb “c”"}


async def test_a_live_reply_ends_with_done() -> None:
    channel = EventChannel()
    for f in reply():
        channel.emit(f)
    body = b"".join([part async for part in sse_stream(channel, 1, UI)])
    assert body.endswith(b'"finishReason": "tool-calls"}\n\n' + DONE)
    assert body.count(b"data: ") == len(chunks_of(reply())) + 1


async def body_of(frames: list[Frame]) -> bytes:
    channel = EventChannel()
    for f in frames:
        channel.emit(f)
    return b"".join([part async for part in sse_stream(channel, 1, UI)])


def test_the_ai_sdk_reads_every_chunk_and_shows_the_reply() -> None:
    """The real ``ai`` package (package-lock.json) validates each chunk and folds them."""
    body = asyncio.run(body_of(reply()))
    read = subprocess.run(
        ["node", str(ROOT / "tests" / "ai_sdk" / "read.mjs")],
        input=body,
        capture_output=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    message = json.loads(read.stdout)["message"]
    assert message["id"] == "msg_a"
    assert [(p["type"], p.get("state")) for p in message["parts"]] == [
        ("step-start", None),
        ("text", "done"),
        ("tool-read_lesson", "output-available"),
        ("step-start", None),
        ("text", "done"),
        ("tool-create_lesson", "input-available"),
        ("data-task", None),
        ("tool-delete_lesson", "approval-requested"),
    ]
    assert message["parts"][1]["text"] == "Let me look."


def test_a_reply_that_goes_on_after_answers_adds_to_the_message_the_client_shows() -> None:
    """After people's answers, ``start`` names no message (``useChat`` adds to the one
    that asked) and the denied calls are ended before the agent's words."""
    state = UiChunks(going_on=("call_3",))
    chunks = [c for f in reply()[:2] for c in state.chunks(f)]
    assert chunks[:3] == [
        {"type": "start"},
        {"type": "tool-output-denied", "toolCallId": "call_3"},
        {"type": "start-step"},
    ]


def test_a_resumed_follow_up_opens_with_the_results_it_follows_in_a_step_of_their_own() -> None:
    opening = [
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "t", "input": {}},
        {"type": "tool-output-available", "toolCallId": "c", "output": {"ok": True}},
    ]
    state = UiChunks(opening=opening)
    frames = [
        frame(RunStartEvent(RUN, "conv_1", None, "msg_f")),
        frame(TextEvent("Done."), 1, 5),
        frame(RunStartEvent(RUN, "conv_1", None, "msg_f")),
    ]
    got = [c["type"] for f in frames for c in state.chunks(f)]
    assert got == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "start-step",
    ]


def test_a_reply_whose_server_ran_a_tool_is_not_sent_back_as_tool_outputs() -> None:
    """The words after a call are the next step's: a front end that posts once its last
    step's calls have outputs does not post a reply the server's tools are part of."""
    frames = [
        frame(RunStartEvent(RUN, "conv_1", "msg_u", "msg_a")),
        frame(ToolStartEvent("call_1", "read_lesson", {"lessonId": "l1"}, "Reading"), 1),
        frame(ToolEndEvent("call_1", "success", output_json='{"title": "Tides"}'), 1),
        frame(TextEvent("It is about tides."), 2, 18),
        Frame(Cursor.end_id(RUN), DoneEvent("msg_a", "complete")),
    ]
    read = subprocess.run(
        ["node", str(ROOT / "tests" / "ai_sdk" / "read.mjs")],
        input=asyncio.run(body_of(frames)),
        capture_output=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    assert json.loads(read.stdout)["sendsToolOutputs"] is False
