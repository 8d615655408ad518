"""The AI SDK's UI message stream: a run's frames as the chunks ``useChat`` reads.

Beside ``sse.py`` (our own events), this is the second framing of the same frames, for
front ends built on the Vercel AI SDK (its ``DefaultChatTransport``). The frames are
the same live or replayed from the document, so the chunks are too: every id a chunk
carries (a text part's, a task's) is derived from the frame, never counted per
connection, which is what lets a resumed stream replace what a client already shows
instead of adding to it.

Only the fields the AI SDK documents for each chunk are written: it validates every
chunk it reads, and an unknown field or type fails the client's stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from shared.agent.stream import events
from shared.agent.stream.sse import Framing
from shared.agent.stream.transcript import Cursor, Frame, args_of

HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}
"""The header that tells the AI SDK's transport it reads this protocol."""

DONE = b"data: [DONE]\n\n"

Chunk = dict[str, Any]

# Why a run ended, in the AI SDK's words: waiting for a person (an answer, an approval,
# a client tool's output) or for a task is a step that ended in tool calls.
_FINISH: dict[events.DoneStatus, str] = {
    "complete": "stop",
    "waiting": "tool-calls",
    "queued": "other",
    "stopped": "other",
}


def _output(output_json: str) -> object:
    try:
        return json.loads(output_json)
    except ValueError:
        return output_json


class UiChunks:
    """Turns one reply's frames, in order, into UI message chunks.

    It remembers only what the protocol needs across frames: whether the message has
    started (``start`` once), which text part is open (``text-start`` before its first
    delta, ``text-end`` before anything that is not text), and whether calls just ended.
    What follows ended calls (words, or more calls) is the next model call's: a step of
    its own (``finish-step``, ``start-step``), as the AI SDK's own backends send it, so a
    front end that sends once the last step's calls have outputs
    (``lastAssistantMessageIsCompleteWithToolCalls``) never takes the server's calls for
    its own.
    """

    def __init__(
        self, going_on: Sequence[str] | None = None, opening: Sequence[Chunk] = ()
    ) -> None:
        # ``going_on``: this reply goes on from the message the client shows (after its
        # answers): ``start`` names no message, so the AI SDK adds to that one instead of
        # showing a second; the calls it denied are ended first (``tool-output-denied``).
        # ``opening``: chunks shown in a step of their own after ``start`` (a resumed
        # follow-up's results, ``following``).
        self._going_on = going_on
        self._opening = list(opening)
        self._started = False
        self._text: str | None = None
        self._ended = False

    def chunks(self, frame: Frame) -> list[Chunk]:
        event = frame.event
        out = self._next_step(event)
        if type(event) is events.TextEvent:
            return out + self._text_delta(frame.id, event.content)
        out += self._close_text()
        match event:
            case events.RunStartEvent():
                if not self._started:
                    self._started = True
                    if self._going_on is None:
                        out.append({"type": "start", "messageId": event.assistant_message_id})
                    else:
                        out.append({"type": "start"})
                        out += [tool_denied(c) for c in self._going_on]
                if self._opening:
                    # A step of their own: a front end that sends once the last step's
                    # calls all have outputs (``lastAssistantMessageIsCompleteWithToolCalls``)
                    # must not take results it did not give for calls it must answer.
                    out += [{"type": "start-step"}, *self._opening, {"type": "finish-step"}]
                    self._opening = []
                out.append({"type": "start-step"})
            case events.TranscriptEvent():
                data = {"content": event.content, "final": event.final}
                out.append({"type": "data-transcript", "id": "transcript", "data": data})
            case events.ToolStartEvent():
                out.append(tool_input(event.id, event.tool, event.args))
            case events.ToolEndEvent():
                out.append(tool_ended(event))
                self._ended = True
            case events.TaskQueuedEvent():
                out.append(tool_input(event.tool_call_id, event.tool, args_of(event.args_json)))
                out.append(
                    task_part(
                        event.task_id, event.tool_call_id, event.tool, "queued", event.display_text
                    )
                )
            case events.QuestionEvent():
                out.append(tool_input(event.tool_call_id, event.tool, args_of(event.args_json)))
                asked = {"toolCallId": event.tool_call_id, "questions": event.questions}
                out.append({"type": "data-question", "id": event.tool_call_id, "data": asked})
            case events.ApprovalRequiredEvent():
                out.append(tool_input(event.tool_call_id, event.tool, event.args))
                out.append(
                    {
                        "type": "tool-approval-request",
                        # The call's own id: the answer names it, and it is checked
                        # against the call waiting in the document.
                        "approvalId": event.tool_call_id,
                        "toolCallId": event.tool_call_id,
                    }
                )
            case events.DoneEvent():
                out.append({"type": "finish-step"})
                if event.status == "stopped":
                    out.append({"type": "abort", "reason": "stopped"})
                out.append({"type": "finish", "finishReason": _FINISH[event.status]})
            case events.ErrorEvent():
                out.append({"type": "error", "errorText": event.message})
                out.append({"type": "finish", "finishReason": "error"})
        return out

    def _next_step(self, event: object) -> list[Chunk]:
        """A step's end and the next one's start, when ``event`` opens what comes after
        ended calls."""
        if not self._ended or isinstance(
            event, events.ToolEndEvent | events.DoneEvent | events.ErrorEvent
        ):
            return []
        self._ended = False
        if isinstance(event, events.RunStartEvent):
            return []
        return [{"type": "finish-step"}, {"type": "start-step"}]

    def _text_delta(self, frame_id: str, delta: str) -> list[Chunk]:
        out: list[Chunk] = []
        if self._text is None:
            # The text part's place in the message: the same live and replayed.
            cursor = Cursor.parse(frame_id)
            place = 0 if cursor.at == "end" else cursor.at.parts
            self._text = f"{cursor.run_id}-text-{place}"
            out.append({"type": "text-start", "id": self._text})
        out.append({"type": "text-delta", "id": self._text, "delta": delta})
        return out

    def _close_text(self) -> list[Chunk]:
        if self._text is None:
            return []
        closed = {"type": "text-end", "id": self._text}
        self._text = None
        return [closed]


def tool_input(call_id: str, tool: str, args: dict[str, Any]) -> Chunk:
    """A call as the AI SDK first shows it: its tool and its input."""
    return {"type": "tool-input-available", "toolCallId": call_id, "toolName": tool, "input": args}


def tool_denied(call_id: str) -> Chunk:
    """A call a person denied, ended as such."""
    return {"type": "tool-output-denied", "toolCallId": call_id}


def task_part(task_id: str, call_id: str, tool: str, status: str, display_text: str) -> Chunk:
    """A task's section as a data part under the task's id: a later one with the same
    id replaces the earlier in the client's message."""
    task = {
        "taskId": task_id,
        "toolCallId": call_id,
        "tool": tool,
        "status": status,
        "displayText": display_text,
    }
    return {"type": "data-task", "id": task_id, "data": task}


def tool_ended(event: events.ToolEndEvent) -> Chunk:
    """A call's end: its output, or its error."""
    if event.status == "success":
        return {
            "type": "tool-output-available",
            "toolCallId": event.id,
            "output": _output(event.output_json),
        }
    error = event.error or event.call_status or "error"
    return {"type": "tool-output-error", "toolCallId": event.id, "errorText": error}


def encode(chunk: Chunk) -> bytes:
    """One chunk as the transport reads it: ``data: {json}`` and a blank line."""
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def encoder(
    going_on: Sequence[str] | None = None, opening: Sequence[Chunk] = ()
) -> Callable[[Frame], bytes]:
    """A fresh encoder of one reply's frames into the protocol's bytes (``going_on``,
    ``opening``: as ``UiChunks``)."""
    state = UiChunks(going_on, opening)

    def encoded(frame: Frame) -> bytes:
        return b"".join(encode(c) for c in state.chunks(frame))

    return encoded


UI = Framing(encoder, DONE)
"""The AI SDK's UI message stream, for ``sse.sse_stream``."""


def going_on(denied: Sequence[str]) -> Framing:
    """The stream of a reply that goes on from the message the client shows, after
    people's answers (``denied``: the calls they denied)."""
    return Framing(lambda: encoder(tuple(denied)), DONE)


def following(opening: Sequence[Chunk]) -> Framing:
    """The stream of a follow-up resumed as a message of its own, that opens with the
    results of the calls it follows (``opening``): the client's copy of the message that
    made the calls cannot be added to by a resume, which replaces what it replays."""
    return Framing(lambda: encoder(None, tuple(opening)), DONE)
