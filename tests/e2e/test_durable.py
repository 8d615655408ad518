"""Durable runs end to end over real sockets: resume from another instance at any cut,
stop, racing sends, queued messages, a SIGKILLed instance, a silent model."""

from __future__ import annotations

import threading

import httpx
import pytest
from google.cloud import firestore

from tests.e2e.conftest import (
    ExtraApi,
    Functions,
    SseEvent,
    StackUser,
    auth,
    conversation_doc,
    conversation_path,
    extra_api,
    read_events,
    settled,
    wait_for,
)
from tests.fakes.openai_server import FakeOpenAI, Hold, Script

pytestmark = pytest.mark.emulator

SEND = "/api/spark/agent/messages"


def events_of(response: httpx.Response) -> list[SseEvent]:
    return [e for e in read_events(response) if isinstance(e, SseEvent)]


def text_of(events: list[SseEvent]) -> str:
    return "".join(e.data["content"] for e in events if e.event == "text")


def streamed(db: firestore.Client, uid: str, conversation_id: str) -> str:
    """The text of the reply being written, as its last streaming write left it."""
    doc = conversation_doc(db, uid, conversation_id) or {}
    message = (doc.get("activeRun") or {}).get("message") or {}
    return "".join(p.get("text", "") for p in message.get("content", []))


@pytest.mark.parametrize("cut", [1, 2, 7, 15])
def test_e2e_resume_from_another_instance_joins_up_exactly(
    cut: int,
    functions: Functions,
    second_api: ExtraApi,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    chunks = [f"tóken {n} 🙂 " for n in range(20)]
    trigger = f"resume me at {cut}"
    # Every word sent, the finish held: the run is live until the resume has joined it.
    hold = Hold(at=len(chunks))
    fake_openai.script(trigger, Script(chunks=chunks, delay=0.05, hold=hold))
    try:
        with httpx.stream(
            "POST", functions.api + SEND, headers=auth(alice), json={"text": trigger}, timeout=30
        ) as r:
            received: list[SseEvent] = []
            for item in read_events(r):
                if isinstance(item, SseEvent):
                    received.append(item)
                    if len(received) == cut:
                        break  # the connection drops here
        conversation_id = received[0].data["conversationId"]
        headers = {**auth(alice), "Last-Event-ID": received[-1].id}
        with httpx.stream(
            "GET",
            second_api.url + conversation_path(conversation_id, "stream"),
            headers=headers,
            timeout=30,
        ) as r:
            assert r.status_code == 200
            hold.release()
            resumed = events_of(r)
    finally:
        hold.release()

    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    stored = "".join(p["text"] for p in doc["messages"][1]["content"] if p["type"] == "text")
    assert stored == "".join(chunks)
    assert text_of(received) + text_of(resumed) == stored
    assert resumed[-1].event == "done" and resumed[-1].data["status"] == "complete"
    assert "run_start" not in [e.event for e in resumed]
    assert len({e.id for e in [*received, *resumed]}) == len(received) + len(resumed)


def test_e2e_resume_without_an_id_replays_from_the_start_then_204_at_the_end(
    functions: Functions, alice: StackUser, bob: StackUser, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script("replay all", Script(chunks=["One ", "two ", "three."]))
    with httpx.stream(
        "POST", functions.api + SEND, headers=auth(alice), json={"text": "replay all"}
    ) as r:
        live = events_of(r)
    conversation_id = live[0].data["conversationId"]
    url = functions.api + conversation_path(conversation_id, "stream")

    with httpx.stream("GET", url, headers=auth(alice)) as r:
        replayed = events_of(r)
    assert [e.event for e in replayed] == ["run_start", "text", "done"]
    assert text_of(replayed) == text_of(live) == "One two three."
    assert replayed[0].id == live[0].id and replayed[-1].id == live[-1].id

    # A client that saw the end gets nothing more; the query parameter works as well.
    after_end = httpx.get(url, params={"lastEventId": live[-1].id}, headers=auth(alice))
    assert after_end.status_code == 204
    assert httpx.get(url, headers=auth(bob)).status_code == 404
    bad = httpx.get(url, headers={**auth(alice), "Last-Event-ID": "nonsense"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def test_e2e_stop_ends_the_run_on_another_instance_keeping_what_was_streamed(
    functions: Functions,
    second_api: ExtraApi,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    chunks = [f"w{n} " for n in range(60)]
    # The model never gets past its tenth word: only the stop can end this run.
    hold = Hold(at=10)
    fake_openai.script("stop me", Script(chunks=chunks, hold=hold))
    try:
        with httpx.stream(
            "POST", functions.api + SEND, headers=auth(alice), json={"text": "stop me"}, timeout=30
        ) as r:
            events: list[SseEvent] = []
            for item in read_events(r):
                if not isinstance(item, SseEvent):
                    continue
                events.append(item)
                if len(events) == 3:
                    conversation_id = events[0].data["conversationId"]
                    answer = httpx.post(
                        second_api.url + conversation_path(conversation_id, "stop"),
                        headers=auth(alice, sse=False),
                    )
                    assert answer.status_code == 202
                    assert answer.json()["status"] == "stopping"
    finally:
        hold.release()
    assert events[-1].event == "done" and events[-1].data["status"] == "stopped"
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    message = doc["messages"][1]
    assert message["status"] == "stopped" and message["finishReason"] == "stopped"
    text = "".join(p["text"] for p in message["content"] if p["type"] == "text")
    assert text == text_of(events) and 0 < len(text) < len("".join(chunks))
    # The conversation takes messages again, and a disconnect alone never stops a run.
    nothing = httpx.post(
        functions.api + conversation_path(conversation_id, "stop"), headers=auth(alice, sse=False)
    )
    assert nothing.status_code == 409 and nothing.json()["error"]["code"] == "no_active_run"


def test_e2e_ten_racing_sends_from_several_tabs_open_exactly_one_run(
    functions: Functions,
    second_api: ExtraApi,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    with httpx.stream("POST", functions.api + SEND, headers=auth(alice), json={"text": "hi"}) as r:
        conversation_id = events_of(r)[0].data["conversationId"]
    # Held until every send is answered: each meets the live run, however late a loaded
    # machine starts its thread (a send after the run's end rightly opens another).
    hold = Hold(at=1)
    fake_openai.script("race", Script(chunks=["slow ", "reply"], hold=hold))
    barrier = threading.Barrier(10)
    statuses: list[int] = []
    codes: list[str] = []

    def send(n: int) -> None:
        api = (functions.api, second_api.url)[n % 2]
        barrier.wait()
        response = httpx.post(
            api + SEND,
            headers=auth(alice),
            json={"text": "race", "conversationId": conversation_id},
            timeout=30,
        )
        statuses.append(response.status_code)
        if response.status_code != 200:
            codes.append(response.json()["error"]["code"])

    threads = [threading.Thread(target=send, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    # The one send that opened the run streams until it is released: its thread waits.
    wait_for(lambda: len(statuses) == 9, what="the nine sends that lost the race")
    hold.release()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] + [409] * 9
    assert codes == ["run_in_progress"] * 9
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 4))
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "user", "assistant"]


def test_e2e_queued_messages_are_answered_in_order(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # Held until the two messages posted meanwhile are queued: they find it live.
    hold = Hold(at=1)
    fake_openai.script("q first", Script(chunks=["Answer ", "one."], hold=hold))
    fake_openai.script("q second", Script(chunks=["Answer two."]))
    fake_openai.script("q third", Script(chunks=["Answer three."]))
    with httpx.stream(
        "POST", functions.api + SEND, headers=auth(alice), json={"text": "q first"}, timeout=30
    ) as r:
        items = read_events(r)
        start = next(items)
        assert isinstance(start, SseEvent)
        conversation_id = start.data["conversationId"]
        for text in ("q second", "q third"):
            queued = httpx.post(
                functions.api + SEND,
                headers=auth(alice),
                json={"text": text, "conversationId": conversation_id, "whenBusy": "queue"},
            )
            assert queued.status_code == 202 and queued.json()["status"] == "queued"
        doc = conversation_doc(db, alice.uid, conversation_id) or {}
        # Every tab sees the queued messages at once.
        assert [m["content"][0]["text"] for m in doc["queuedMessages"]] == ["q second", "q third"]
        hold.release()
        list(items)

    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 6))
    texts = [m["content"][0]["text"] for m in doc["messages"]]
    assert texts == [
        "q first",
        "Answer one.",
        "q second",
        "Answer two.",
        "q third",
        "Answer three.",
    ]
    assert "queuedMessages" not in doc


def test_e2e_killed_instance_mid_stream_is_closed_by_its_watchdog(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    fragile = extra_api(functions, SPARK_RUN_LEASE_SECONDS="3")
    chunks = [f"k{n} " for n in range(100)]
    hold = Hold(at=8)  # the model is mid-reply when its instance dies
    try:
        fake_openai.script("kill me", Script(chunks=chunks, hold=hold))
        with httpx.stream(
            "POST", fragile.url + SEND, headers=auth(alice), json={"text": "kill me"}, timeout=30
        ) as r:
            start = next(e for e in read_events(r) if isinstance(e, SseEvent))
            conversation_id = start.data["conversationId"]
            hold.wait_held()
            wait_for(lambda: streamed(db, alice.uid, conversation_id), what="a streaming write")
            fragile.kill()
    finally:
        hold.release()
        fragile.stack.stop()

    # Closed by its watchdog (its lease, 3 s, and grace, 1 s, after its last write), with
    # no new message: nothing else would close it before the wait gives up (60 s).
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    message = doc["messages"][1]
    assert message["status"] == "error" and message["error"]["code"] == "run_interrupted"
    text = "".join(p["text"] for p in message["content"] if p["type"] == "text")
    assert text and "".join(chunks).startswith(text)
    # And the conversation accepts messages again.
    again = httpx.post(
        functions.api + SEND,
        headers=auth(alice),
        json={"text": "hello again", "conversationId": conversation_id},
        timeout=30,
    )
    assert again.status_code == 200


def test_e2e_silent_model_fails_the_run_with_a_clear_error(
    functions: Functions, alice: StackUser, db: firestore.Client, fake_openai: FakeOpenAI
) -> None:
    # Silent until the run has given up on it (this api allows 2 s of silence).
    impatient = extra_api(functions, SPARK_PROVIDER_IDLE_SECONDS="2")
    hold = Hold(at=0)
    fake_openai.script("be silent", Script(chunks=["late"], hold=hold))
    try:
        with httpx.stream(
            "POST", impatient.url + SEND, headers=auth(alice), json={"text": "be silent"}
        ) as r:
            events = events_of(r)
    finally:
        hold.release()
        impatient.stack.stop()
    assert events[-1].event == "error" and events[-1].data["code"] == "provider_timeout"
    conversation_id = events[0].data["conversationId"]
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2))
    assert doc["messages"][1]["status"] == "error"


def test_e2e_a_hundred_sends_from_five_clients_land_or_get_a_clean_refusal(
    functions: Functions,
    second_api: ExtraApi,
    alice: StackUser,
    db: firestore.Client,
    fake_openai: FakeOpenAI,
) -> None:
    with httpx.stream("POST", functions.api + SEND, headers=auth(alice), json={"text": "hi"}) as r:
        conversation_id = events_of(r)[0].data["conversationId"]
    fake_openai.script("crowd", Script(chunks=["one ", "reply"], delay=0.2))
    clients = [httpx.Client(timeout=60) for _ in range(5)]
    barrier = threading.Barrier(20)
    statuses: list[int] = []

    def send(n: int) -> None:
        api = (functions.api, second_api.url)[n % 2]
        barrier.wait()
        response = clients[n % 5].post(
            api + SEND,
            headers=auth(alice, sse=False),
            json={"text": "crowd", "conversationId": conversation_id},
        )
        statuses.append(response.status_code)
        if response.status_code >= 400:
            assert response.json()["error"]["code"] in ("run_in_progress", "store_unavailable")

    for wave in range(5):
        threads = [threading.Thread(target=send, args=(wave * 20 + n,)) for n in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for client in clients:
        client.close()
    assert len(statuses) == 100 and set(statuses) <= {202, 409, 503}
    accepted = statuses.count(202)
    assert accepted >= 1
    doc = wait_for(lambda: settled(db, alice.uid, conversation_id, 2 + 2 * accepted), 60)
    roles = [m["role"] for m in doc["messages"]]
    # Every accepted message is there once, each followed by its reply; nothing else.
    assert roles == ["user", "assistant"] * (1 + accepted)
    ids = [m["id"] for m in doc["messages"]]
    assert len(ids) == len(set(ids))
