from __future__ import annotations

import asyncio
import json

from shared.agent.stream.events import DoneEvent, RunStartEvent, TextEvent, ToolEndEvent, UsageEvent
from shared.agent.stream.sse import KEEPALIVE, EventChannel, encode, sse_stream
from shared.agent.stream.transcript import Frame


def test_sse_encode_has_id_event_and_camel_case_json() -> None:
    frame = encode(Frame("run_1:0:0", RunStartEvent("run_1", "conv_1", "msg_1", "msg_2")))
    head, data = frame.decode().rstrip("\n").rsplit("\n", 1)
    assert head == "id: run_1:0:0\nevent: run_start"
    assert json.loads(data.removeprefix("data: ")) == {
        "runId": "run_1",
        "conversationId": "conv_1",
        "userMessageId": "msg_1",
        "assistantMessageId": "msg_2",
    }
    assert frame.endswith(b"\n\n")


def test_sse_internal_fields_never_reach_the_wire() -> None:
    end = ToolEndEvent("call_1", "error", error="No.", output_json='{"secret": 1}')
    data = encode(Frame("r:3:0", end)).decode().split("data: ", 1)[1]
    assert json.loads(data) == {"id": "call_1", "status": "error", "error": "No."}


async def test_sse_channel_drops_events_clients_never_see() -> None:
    channel = EventChannel("r")
    channel.emit(Frame("r:1:1", UsageEvent(3, 4, "stop")))
    channel.emit(Frame("r:end", DoneEvent("m", "complete")))
    body = b"".join([chunk async for chunk in sse_stream(channel, keepalive=5)]).decode()
    assert body.count("event:") == 1


def test_sse_text_with_newlines_stays_one_data_line() -> None:
    frame = encode(Frame("r:1:17", TextEvent("line one\nline two"))).decode()
    assert frame.count("\n") == 4
    assert json.loads(frame.split("data: ", 1)[1]) == {"content": "line one\nline two"}


def test_sse_text_frames_are_byte_for_byte_what_json_dumps_writes() -> None:
    # The text frame skips json.dumps (the hot path): its bytes must not change.
    for text in ["Hi", ' say "no" \\ ', "tab\there", "\u2028é😀", "\x00\x1f\x7f", ""]:
        frame = encode(Frame("r:1:2", TextEvent(text)))
        payload = json.dumps({"content": text}, ensure_ascii=False)
        assert frame == f"id: r:1:2\nevent: text\ndata: {payload}\n\n".encode()


async def test_sse_stream_sends_frames_with_their_ids_and_ends_after_done() -> None:
    channel = EventChannel()
    channel.emit(Frame("r:1:1", TextEvent("a")))
    channel.emit(Frame("r:1:2", TextEvent("b")))
    channel.emit(Frame("r:end", DoneEvent("msg_2", "complete")))
    channel.emit(Frame("r:1:12", TextEvent("never sent")))
    body = b"".join([chunk async for chunk in sse_stream(channel, keepalive=5)]).decode()
    assert [line for line in body.splitlines() if line.startswith("id:")] == [
        "id: r:1:1",
        "id: r:1:2",
        "id: r:end",
    ]
    assert "never sent" not in body


async def test_sse_stream_sends_keepalive_comment_when_silent() -> None:
    channel = EventChannel()
    stream = sse_stream(channel, keepalive=0.05)
    assert await anext(stream) == KEEPALIVE
    done = Frame("r:end", DoneEvent("m", "complete"))
    asyncio.get_running_loop().call_later(0.01, channel.emit, done)
    frame = await anext(stream)
    assert frame.startswith(b"id: r:end\nevent: done\n")


async def test_sse_channel_end_closes_a_stream_whose_run_died_silently() -> None:
    channel = EventChannel()
    channel.emit(Frame("r:1:7", TextEvent("partial")))
    channel.end()
    body = b"".join([chunk async for chunk in sse_stream(channel, keepalive=5)]).decode()
    assert body.endswith(
        'id: r:end\nevent: error\ndata: {"message": "Something went wrong on our side; '
        'please try again.", "code": "internal"}\n\n'
    )


async def test_sse_channel_end_after_done_adds_nothing() -> None:
    channel = EventChannel()
    channel.emit(Frame("r:end", DoneEvent("m", "complete")))
    channel.end()
    body = b"".join([chunk async for chunk in sse_stream(channel, keepalive=5)]).decode()
    assert body.count("event:") == 1
