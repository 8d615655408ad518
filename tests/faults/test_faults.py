"""Faults injected into the running stack; every conversation is audited afterwards:
0 lost user messages, 0 lost or doubled assistant text, 0 runs left streaming, exactly
one tool result per tool call, no document over 1 MiB."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from google.cloud import firestore

from shared.ids import task_id_for
from shared.queue.base import SIGNATURE_HEADER, TASK_NAME_HEADER, sign
from shared.queue.naming import attempt_name
from shared.schemas.tasks import ToolTask
from tests.e2e.conftest import (
    ExtraApi,
    Functions,
    SseEvent,
    StackUser,
    auth,
    conversation_path,
    extra_api,
    read_events,
    settled,
    wait_for,
)
from tests.e2e.test_durable import streamed
from tests.fakes.openai_server import FakeOpenAI, Hold, Script
from tests.faults.conftest import audit

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"


def stream(url: str, user: StackUser, body: dict[str, Any]) -> list[SseEvent]:
    with httpx.stream("POST", url, headers=auth(user), json=body, timeout=60) as r:
        return [e for e in read_events(r) if isinstance(e, SseEvent)]


def text_of(events: list[SseEvent]) -> str:
    return "".join(e.data["content"] for e in events if e.event == "text")


@pytest.mark.parametrize(
    "script",
    [
        Script(chunks=["Half ", "a ", "reply"], disconnect_after=2),
        Script(status=500),
        Script(chunks=["a", "b"], error_after=1),
    ],
    ids=["cut-mid-reply", "provider-5xx", "error-in-stream"],
)
def test_fault_provider_failures_keep_everything_and_close_the_run(
    script: Script,
    functions: Functions,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    trigger = f"fault {random.random()}"
    fake_openai.script(trigger, script)
    events = stream(functions.api + SEND, alice, {"text": trigger})
    assert events[-1].event == "error"
    conversation_id = events[0].data["conversationId"]
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    # The provider's own words stay in the log, never in the document.
    assert "scripted failure" not in json.dumps(doc, default=str)
    audit(doc, [trigger], {events[0].data["assistantMessageId"]: text_of(events)})


def test_fault_provider_silence(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # Silent until the run has given up on it (this api allows 2 s of silence).
    impatient = extra_api(functions, SPARK_PROVIDER_IDLE_SECONDS="2")
    hold = Hold(at=0)
    fake_openai.script("fault: silence", Script(chunks=["late"], hold=hold))
    try:
        events = stream(impatient.url + SEND, alice, {"text": "fault: silence"})
    finally:
        hold.release()
        impatient.stack.stop()
    assert events[-1].data["code"] == "provider_timeout"
    conversation_id = events[0].data["conversationId"]
    audit(wait_for(lambda: settled(db, alice.uid, conversation_id, 2)), ["fault: silence"], {})


def test_fault_disconnects_then_resumes_at_random_offsets(
    functions: Functions,
    second_api: ExtraApi,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    rng = random.Random(7)
    for round_ in range(4):
        trigger = f"fault: resume {round_}"
        fake_openai.script(trigger, Script(chunks=[f"w{n} é " for n in range(30)], delay=0.03))
        cut = rng.randint(1, 25)
        with httpx.stream(
            "POST", functions.api + SEND, headers=auth(alice), json={"text": trigger}
        ) as r:
            seen: list[SseEvent] = []
            for item in read_events(r):
                if isinstance(item, SseEvent):
                    seen.append(item)
                    if len(seen) == cut:
                        break
        conversation_id = seen[0].data["conversationId"]
        time.sleep(rng.random() * 0.5)
        url = second_api.url + conversation_path(conversation_id, "stream")
        with httpx.stream(
            "GET", url, headers={**auth(alice), "Last-Event-ID": seen[-1].id}, timeout=60
        ) as r:
            rest = (
                [e for e in read_events(r) if isinstance(e, SseEvent)]
                if r.status_code == 200
                else []
            )
        doc = wait_for(lambda c=conversation_id: settled(db, alice.uid, c, 2))
        message_id = seen[0].data["assistantMessageId"]
        audit(doc, [trigger], {message_id: text_of(seen) + text_of(rest)})
        stored = "".join(p["text"] for p in doc["messages"][1]["content"] if p["type"] == "text")
        assert text_of(seen) + text_of(rest) == stored


def test_fault_two_tabs_racing(
    functions: Functions,
    second_api: ExtraApi,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    first = stream(functions.api + SEND, alice, {"text": "fault: tabs"})
    conversation_id = first[0].data["conversationId"]
    # Held until both tabs are answered: the second always meets the first one's run.
    hold = Hold(at=0)
    fake_openai.script("fault: tab", Script(chunks=["x"], hold=hold))
    barrier = threading.Barrier(2)
    codes: list[int] = []

    def tab(api: str) -> None:
        barrier.wait()
        response = httpx.post(
            api + SEND,
            headers=auth(alice, sse=False),
            json={"text": "fault: tab", "conversationId": conversation_id},
        )
        codes.append(response.status_code)

    threads = [threading.Thread(target=tab, args=(api,)) for api in (functions.api, second_api.url)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        hold.release()
    assert sorted(codes) == [202, 409]
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 4))
    audit(doc, ["fault: tabs", "fault: tab"], {})


def test_fault_a_task_delivered_three_times_and_twice_at_once(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        "fault: lesson",
        Script(
            chunks=[],
            tool_calls=[("create_lesson", json.dumps({"topic": "storms", "audience": "Year 4"}))],
            then=Script(chunks=["Your lesson is ready."]),
        ),
    )
    events = stream(functions.api + SEND, alice, {"text": "fault: lesson"})
    conversation_id = events[0].data["conversationId"]
    call_id = events[-2].data["toolCallId"]
    task_id = task_id_for(conversation_id, call_id)
    body = ToolTask(
        user_id=alice.uid, conversation_id=conversation_id, task_id=task_id, attempt=1
    ).to_bytes()
    name = attempt_name(task_id, 1)
    key = os.environ["SPARK_TASKS_LOCAL_KEY"]
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(key, body, name, int(time.time())),
        TASK_NAME_HEADER: name,
    }

    def deliver(_: int) -> int:
        return httpx.post(functions.tasks, content=body, headers=headers, timeout=60).status_code

    with ThreadPoolExecutor(2) as pool:
        assert all(s in (200, 409) for s in pool.map(deliver, range(2)))
    for _ in range(3):
        assert deliver(0) in (200, 409)
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 4), timeout=60)
    audit(doc, ["fault: lesson"], {})


def test_fault_the_api_killed_mid_stream(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fragile = extra_api(functions, SPARK_RUN_LEASE_SECONDS="3")
    hold = Hold(at=6)  # the model is mid-reply when its instance dies
    try:
        fake_openai.script("fault: kill", Script(chunks=[f"k{n} " for n in range(80)], hold=hold))
        with httpx.stream(
            "POST", fragile.url + SEND, headers=auth(alice), json={"text": "fault: kill"}
        ) as r:
            start = next(e for e in read_events(r) if isinstance(e, SseEvent))
            hold.wait_held()
            conversation_id = start.data["conversationId"]
            # Killed once its reply is in the document (as a process dies mid-reply),
            # not in the instant between its opening and its watchdog's enqueue.
            wait_for(lambda: streamed(db, alice.uid, conversation_id), what="a streaming write")
            fragile.kill()
    finally:
        hold.release()
        fragile.stack.stop()
    conversation_id = start.data["conversationId"]
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    assert doc["messages"][1]["error"]["code"] == "run_interrupted"
    audit(doc, ["fault: kill"], {})


def test_fault_a_conversation_past_its_budget_and_past_1_mib_of_history(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    roomy = extra_api(functions, SPARK_LIVE_DOC_BYTES="65536")
    try:
        big = "Tides rise and fall twice a day. " * 1900  # ~62 KB a reply
        conversation_id = None
        sent = []
        for n in range(18):  # ~1.1 MB of history in all
            trigger = f"fault: grow {n}"
            fake_openai.script(trigger, Script(chunks=[big]))
            body: dict[str, Any] = {"text": trigger}
            if conversation_id:
                body["conversationId"] = conversation_id
            events = stream(roomy.url + SEND, alice, body)
            assert events[-1].event == "done", events[-1]
            conversation_id = events[0].data["conversationId"]
            sent.append(trigger)
    finally:
        roomy.stack.stop()
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    # The newest 20 messages (the model's history window) stay live; the rest moved.
    assert doc["archived"]["count"] == 36 - len(doc["messages"]) >= 10
    segments = (
        db.collection(alice.uid)
        .document("client")
        .collection("conversations")
        .document(conversation_id)
        .collection("archive")
        .order_by("segment")
        .stream()
    )
    counted = [
        m
        for s in segments
        if s.to_dict()["segment"] <= doc["archived"]["segments"]
        for m in s.to_dict()["messages"]
    ]
    whole = {**doc, "messages": counted + doc["messages"]}
    assert len(whole["messages"]) == 36
    audit(doc, [], {})  # the live document: within 1 MiB, nothing streaming
    user_texts = [m["content"][0]["text"] for m in whole["messages"] if m["role"] == "user"]
    assert user_texts == sent
