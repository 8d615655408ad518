from __future__ import annotations

import asyncio
import json

from shared.agent.events import DoneEvent, RunStartEvent, TextEvent
from shared.agent.sse import KEEPALIVE, EventChannel, encode, sse_stream


def test_sse_encode_has_id_event_and_camel_case_json() -> None:
    frame = encode(3, RunStartEvent("run_1", "conv_1", "msg_1", "msg_2")).decode()
    head, data = frame.rstrip("\n").rsplit("\n", 1)
    assert head == "id: 3\nevent: run_start"
    assert json.loads(data.removeprefix("data: ")) == {
        "runId": "run_1",
        "conversationId": "conv_1",
        "userMessageId": "msg_1",
        "assistantMessageId": "msg_2",
    }
    assert frame.endswith("\n\n")


def test_sse_text_with_newlines_stays_one_data_line() -> None:
    frame = encode(1, TextEvent("line one\nline two")).decode()
    assert frame.count("\n") == 4
    assert json.loads(frame.split("data: ", 1)[1]) == {"content": "line one\nline two"}


async def test_sse_stream_numbers_events_and_ends_after_done() -> None:
    channel = EventChannel()
    channel.emit(TextEvent("a"))
    channel.emit(TextEvent("b"))
    channel.emit(DoneEvent("msg_2", "complete"))
    channel.emit(TextEvent("never sent"))
    body = b"".join([chunk async for chunk in sse_stream(channel, keepalive=5)]).decode()
    assert [line for line in body.splitlines() if line.startswith("id:")] == [
        "id: 1",
        "id: 2",
        "id: 3",
    ]
    assert "never sent" not in body


async def test_sse_stream_sends_keepalive_comment_when_silent() -> None:
    channel = EventChannel()
    stream = sse_stream(channel, keepalive=0.05)
    assert await anext(stream) == KEEPALIVE
    asyncio.get_running_loop().call_later(0.01, channel.emit, DoneEvent("m", "complete"))
    frame = await anext(stream)
    assert frame.startswith(b"id: 1\nevent: done\n")


async def test_sse_channel_end_closes_a_stream_whose_run_died_silently() -> None:
    channel = EventChannel()
    channel.emit(TextEvent("partial"))
    channel.end()
    body = b"".join([chunk async for chunk in sse_stream(channel, keepalive=5)]).decode()
    assert body.endswith(
        'event: error\ndata: {"message": "Something went wrong on our side; '
        'please try again.", "code": "internal"}\n\n'
    )


async def test_sse_channel_end_after_done_adds_nothing() -> None:
    channel = EventChannel()
    channel.emit(DoneEvent("m", "complete"))
    channel.end()
    body = b"".join([chunk async for chunk in sse_stream(channel, keepalive=5)]).decode()
    assert body.count("event:") == 1
