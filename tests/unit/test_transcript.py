"""The one reducer and its projection: the live stream, the stored message and a resume
from any cut agree, byte for byte."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.agent.stream.events import (
    AgentEvent,
    DoneEvent,
    ErrorEvent,
    RunStartEvent,
    TaskQueuedEvent,
    TextEvent,
    ToolEndEvent,
    ToolStartEvent,
    UsageEvent,
)
from shared.agent.stream.replay import replay
from shared.agent.stream.transcript import Cursor, Frame, Transcript
from shared.errors import RequestError
from shared.schemas.documents import Message

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def placeholder() -> Message:
    return Message(
        id="msg_a", role="assistant", created_at=NOW, status="streaming", content=[], run_id="run_1"
    )


def fold(events: list[AgentEvent]) -> tuple[list[Frame], list[Message]]:
    """The live frames, and the stored message after each event."""
    transcript = Transcript(placeholder())
    frames, snapshots = [], []
    for event in events:
        frame = Frame(transcript.apply(event), event)
        if not isinstance(event, UsageEvent):
            frames.append(frame)
        snapshots.append(transcript.message())
    return frames, snapshots


def text_of(frames: list[Frame]) -> str:
    return "".join(f.event.content for f in frames if isinstance(f.event, TextEvent))


_TEXT = st.text(alphabet=st.sampled_from('ab é\n🙂"\\'), min_size=1, max_size=4)
_STEP = st.one_of(
    st.tuples(st.just("text"), _TEXT),
    st.tuples(st.just("tool"), st.just("")),
    st.tuples(st.just("task"), st.just("")),
)


def events_for(steps: list[tuple[str, str]]) -> list[AgentEvent]:
    events: list[AgentEvent] = [RunStartEvent("run_1", "conv_1", "msg_u", "msg_a")]
    for n, (kind, text) in enumerate(steps):
        if kind == "text":
            events.append(TextEvent(text))
        elif kind == "tool":
            events.append(ToolStartEvent(f"c{n}", "echo", {}, "Echoing", args_json="{}"))
            events.append(ToolEndEvent(f"c{n}", "success", output_json='"ok"'))
        else:
            events.append(TaskQueuedEvent(f"t{n}", f"c{n}", "make", "Making", args_json="{}"))
    events.append(UsageEvent(3, 4, "stop"))
    events.append(
        DoneEvent("msg_a", "queued" if any(k == "task" for k, _ in steps) else "complete")
    )
    return events


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=25), data=st.data())
def test_resume_from_any_cut_joins_up_with_what_was_received(
    steps: list[tuple[str, str]], data: st.DataObject
) -> None:
    frames, snapshots = fold(events_for(steps))
    final = snapshots[-1]
    cut = data.draw(st.integers(1, len(frames)), label="frames received before the cut")
    # The resume first sees a stored version that may lag behind the client.
    lag = data.draw(st.integers(0, len(snapshots) - 1), label="stored version first seen")
    received = frames[:cut]
    cursor = Cursor.parse(received[-1].id)

    first = replay(snapshots[lag], "conv_1", "msg_u", cursor)
    if first:
        cursor = Cursor.parse(first[-1].id)
    rest = replay(final, "conv_1", "msg_u", cursor)
    resumed = first + rest

    assert text_of(received) + text_of(resumed) == final.text
    sent = [*received, *resumed]
    assert (
        isinstance(sent[-1].event, DoneEvent)
        and sum(isinstance(f.event, DoneEvent) for f in sent) == 1
    )
    starts = [f.event.id for f in sent if isinstance(f.event, ToolStartEvent)]
    assert len(starts) == len(set(starts)) == sum(k == "tool" for k, _ in steps)
    ends = [f.event.id for f in sent if isinstance(f.event, ToolEndEvent)]
    assert len(ends) == len(set(ends))


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=25))
def test_replay_of_the_stored_message_rebuilds_the_live_stream(
    steps: list[tuple[str, str]],
) -> None:
    frames, snapshots = fold(events_for(steps))
    replayed = replay(snapshots[-1], "conv_1", "msg_u")
    # Text arrives coalesced, everything else identical: same ids at every boundary.
    live_boundaries = [f for f in frames if not isinstance(f.event, TextEvent)]
    replay_boundaries = [f for f in replayed if not isinstance(f.event, TextEvent)]
    assert [(f.id, f.event.type) for f in replay_boundaries] == [
        (f.id, f.event.type) for f in live_boundaries
    ]
    assert text_of(replayed) == text_of(frames)
    assert {f.id for f in replayed} <= {f.id for f in frames}


def test_closing_events_give_every_open_call_a_result() -> None:
    transcript = Transcript(placeholder())
    for event in [
        RunStartEvent("run_1", "conv_1", None, "msg_a"),
        TextEvent("Working"),
        ToolStartEvent("c1", "echo", {}, "Echoing"),
        TaskQueuedEvent("t2", "c2", "make", "Making"),
    ]:
        transcript.apply(event)
    for event in transcript.closing_events("stopped"):
        transcript.apply(event)
    transcript.apply(DoneEvent("msg_a", "stopped"))
    message = transcript.message()
    calls = {p.tool_call.id: p.tool_call.status for p in message.content if p.tool_call}
    results = {p.tool_result.tool_call_id for p in message.content if p.tool_result}
    assert calls == {"c1": "error", "c2": "cancelled"}
    assert results == {"c1", "c2"}
    assert (message.status, message.finish_reason, message.text) == (
        "stopped",
        "stopped",
        "Working",
    )


def test_usage_adds_up_over_steps_and_length_is_kept() -> None:
    transcript = Transcript(placeholder())
    transcript.apply(UsageEvent(10, 5, "tool_calls"))
    transcript.apply(UsageEvent(20, 7, "length"))
    transcript.apply(DoneEvent("msg_a", "complete"))
    message = transcript.message()
    assert message.usage is not None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (30, 12)
    assert message.finish_reason == "length"


def test_error_terminal_is_replayed_as_the_same_error() -> None:
    frames, snapshots = fold(
        [RunStartEvent("run_1", "conv_1", None, "msg_a"), TextEvent("Hi"), ErrorEvent("Oops", "x")]
    )
    assert replay(snapshots[-1], "conv_1", None)[-1] == frames[-1]


@pytest.mark.parametrize("raw", ["", "12", "run_1", "run_1:1", "run_1:a:b", "r/1:1:1", "x" * 300])
def test_cursor_refuses_ids_we_never_sent(raw: str) -> None:
    with pytest.raises(RequestError):
        Cursor.parse(raw)


def test_cursor_round_trips() -> None:
    for raw in ["run_1:0:0", "run_1:12:345", "run_1:end"]:
        assert str(Cursor.parse(raw)) == raw


def test_a_bad_call_with_malformed_arguments_replays_as_it_was_sent() -> None:
    frames, snapshots = fold(
        [
            RunStartEvent("run_1", "conv_1", None, "msg_a"),
            ToolStartEvent("c1", "echo", {}, "Checking a tool call", args_json="{nope"),
            ToolEndEvent("c1", "error", error="Bad JSON.", output_json='{"error": "Bad JSON."}'),
            DoneEvent("msg_a", "complete"),
        ]
    )
    assert replay(snapshots[-1], "conv_1", None) == frames
