"""The ``api`` edge through the real functions-framework ASGI app, on fakes."""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from functions_framework.aio import create_asgi_app
from spark_http.app import ApiApp
from starlette.requests import Request
from starlette.responses import StreamingResponse

from shared.agent.run.runs import new_run
from shared.errors import ProviderRejected
from shared.llm.scripted import ScriptedProvider, Step
from shared.queue.memory import InMemoryTaskQueue
from shared.schemas.documents import Conversation
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from tests.unit.helpers import ALICE, Fakes, api_of, make_service, serving

URL = "/api/spark/agent/messages"
SSE = {"Accept": "text/event-stream", "Authorization": "Bearer alice-token"}


def parse_sse(body: str) -> list[tuple[str, str, dict[str, object]]]:
    events = []
    for frame in body.strip().split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in frame.splitlines() if not line.startswith(":")
        )
        events.append((fields["id"], fields["event"], json.loads(fields["data"])))
    return events


def make_api(provider: ScriptedProvider, fakes: Fakes) -> ApiApp:
    return api_of(make_service(provider, fakes=fakes))


@pytest.fixture
def store() -> InMemoryConversationStore:
    return InMemoryConversationStore()


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider([Step.reply("Hello", " there!")])


def api_asgi(api: ApiApp) -> Any:
    app = create_asgi_app(target="api", source=str(Path(__file__).with_name("ff_target.py")))
    sys.modules["ff_target"].current = api  # type: ignore[attr-defined]
    return app


@pytest.fixture
async def client(
    store: InMemoryConversationStore, provider: ScriptedProvider
) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(make_api(provider, Fakes(store))) as client:
        yield client


async def test_post_message_streams_sse_per_design(
    client: httpx.AsyncClient, store: InMemoryConversationStore
) -> None:
    response = await client.post(URL, headers=SSE, json={"text": "hello"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    events = parse_sse(response.text)
    assert [name for _, name, _ in events] == ["run_start", "text", "text", "done"]
    start = events[0][2]
    run_id = start["runId"]
    assert [seq for seq, _, _ in events] == [
        f"{run_id}:0:0",
        f"{run_id}:1:5",
        f"{run_id}:1:12",
        f"{run_id}:end",
    ]
    assert events[-1][2] == {"messageId": start["assistantMessageId"], "status": "complete"}
    stored = await store.get("alice", str(start["conversationId"]))
    assert stored is not None and stored.messages[1].text == "Hello there!"
    assert stored.messages[1].usage is not None


async def test_post_message_accepts_curl_default_content_type(client: httpx.AsyncClient) -> None:
    headers = {**SSE, "Content-Type": "application/x-www-form-urlencoded"}
    response = await client.post(URL, headers=headers, content=b'{"text":"hello"}')
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        ({"Accept": "text/event-stream"}, {"text": "hi"}, 401, "unauthenticated"),
        ({**SSE, "Authorization": "Bearer forged"}, {"text": "hi"}, 401, "unauthenticated"),
        ({**SSE, "Authorization": "Basic abc"}, {"text": "hi"}, 401, "unauthenticated"),
        ({**SSE}, {"text": ""}, 400, "invalid_request"),
        ({**SSE}, {"text": "hi", "extra": 1}, 400, "invalid_request"),
        ({**SSE}, {"text": "x" * 40000}, 400, "invalid_request"),
        ({**SSE}, ["not", "an", "object"], 400, "invalid_request"),
        ({**SSE}, {"text": "hi", "conversationId": "conv_missing"}, 404, "not_found"),
    ],
)
@pytest.mark.leaves_steps("refused before any model call")
async def test_post_message_bad_requests_get_json_errors_and_change_nothing(
    client: httpx.AsyncClient,
    store: InMemoryConversationStore,
    headers: dict[str, str],
    body: object,
    status: int,
    code: str,
) -> None:
    response = await client.post(URL, headers=headers, json=body)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]
    assert store.writes == {}


@pytest.mark.leaves_steps("refused before any model call")
async def test_post_message_invalid_json_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, headers=SSE, content=b"{nope")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "The request body is not valid JSON."


@pytest.mark.leaves_steps("refused before any model call")
async def test_post_message_oversized_body_is_413(
    client: httpx.AsyncClient, store: InMemoryConversationStore
) -> None:
    response = await client.post(URL, headers=SSE, content=b"{" + b" " * (1024 * 1024) + b"}")
    assert response.status_code == 413
    assert store.writes == {}


@pytest.mark.leaves_steps("refused before any model call")
async def test_post_message_multipart_is_415(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, headers=SSE, files={"f": b"x"})
    assert response.status_code == 415


async def test_other_users_conversation_is_404(
    client: httpx.AsyncClient, store: InMemoryConversationStore, provider: ScriptedProvider
) -> None:
    first = parse_sse((await client.post(URL, headers=SSE, json={"text": "hello"})).text)
    conversation_id = first[0][2]["conversationId"]
    bob = {**SSE, "Authorization": "Bearer bob-token"}
    response = await client.post(
        URL, headers=bob, json={"text": "hi", "conversationId": conversation_id}
    )
    assert response.status_code == 404
    assert await store.get("bob", str(conversation_id)) is None


@pytest.mark.leaves_steps("refused before any model call")
async def test_unknown_path_and_wrong_method(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/nothing")).json()["error"]["code"] == "not_found"
    response = await client.get(URL, headers=SSE)
    assert response.status_code == 405
    assert (await client.get("/healthz")).json() == {"status": "ok"}


@pytest.mark.leaves_steps("the reply is left to its task, not delivered here")
async def test_post_message_without_a_stream_is_acknowledged_with_202(
    store: InMemoryConversationStore, provider: ScriptedProvider
) -> None:
    fakes = Fakes(store, InMemoryTaskLedgerStore(), InMemoryLessonStore(), InMemoryTaskQueue())
    api = make_api(provider, fakes)
    transport = httpx.ASGITransport(app=api_asgi(api))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        response = await client.post(
            URL, headers={"Authorization": "Bearer alice-token"}, json={"text": "hi"}
        )
    assert response.status_code == 202
    ack = response.json()
    conversation = await store.get("alice", ack["conversationId"])
    assert conversation is not None and conversation.active_run is not None
    assert conversation.active_run.status == "queued"
    assert conversation.messages[0].id == ack["messageId"]
    (task,) = [t for t in fakes.queue.take() if not t.name.startswith("watch-")]
    assert json.loads(task.body) == {
        "userId": "alice",
        "conversationId": ack["conversationId"],
        "kind": "reply",
        "runId": conversation.active_run.run_id,
    }


@pytest.mark.leaves_steps("refused before any model call")
async def test_post_message_202_when_the_queue_is_down_is_503_and_keeps_the_message(
    store: InMemoryConversationStore, provider: ScriptedProvider
) -> None:
    fakes = Fakes(store, InMemoryTaskLedgerStore(), InMemoryLessonStore(), InMemoryTaskQueue())
    fakes.queue.failing = True
    api = make_api(provider, fakes)
    transport = httpx.ASGITransport(app=api_asgi(api))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        response = await client.post(
            URL, headers={"Authorization": "Bearer alice-token"}, json={"text": "hi"}
        )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "queue_unavailable"
    ((_, conversation_id),) = store._documents
    conversation = await store.get("alice", conversation_id)
    assert conversation is not None and conversation.active_run is None
    user, reply = conversation.messages
    assert user.text == "hi"
    assert reply.status == "error" and reply.error is not None


def resume_url(conversation_id: object) -> str:
    return f"/api/spark/agent/conversations/{conversation_id}/stream"


async def test_resume_replays_the_rest_then_204_at_the_end(
    client: httpx.AsyncClient, store: InMemoryConversationStore
) -> None:
    live = parse_sse((await client.post(URL, headers=SSE, json={"text": "hello"})).text)
    conversation_id = live[0][2]["conversationId"]
    auth = {"Authorization": "Bearer alice-token"}

    whole = await client.get(resume_url(conversation_id), headers=auth)
    assert whole.status_code == 200
    assert parse_sse(whole.text) == [
        (live[0][0], "run_start", live[0][2]),
        (f"{live[0][2]['runId']}:1:12", "text", {"content": "Hello there!"}),
        live[-1],
    ]
    rest = await client.get(
        resume_url(conversation_id), headers={**auth, "Last-Event-ID": live[1][0]}
    )
    assert [(e, d) for _, e, d in parse_sse(rest.text)] == [
        ("text", {"content": " there!"}),
        ("done", live[-1][2]),
    ]
    at_end = await client.get(
        resume_url(conversation_id), params={"lastEventId": live[-1][0]}, headers=auth
    )
    assert at_end.status_code == 204


async def test_resume_refuses_strangers_and_ids_it_never_sent(client: httpx.AsyncClient) -> None:
    live = parse_sse((await client.post(URL, headers=SSE, json={"text": "hello"})).text)
    conversation_id = live[0][2]["conversationId"]
    bob = await client.get(
        resume_url(conversation_id), headers={"Authorization": "Bearer bob-token"}
    )
    assert bob.status_code == 404
    alice = {"Authorization": "Bearer alice-token"}
    for bad in ("12", "run_nope:1:1"):
        response = await client.get(
            resume_url(conversation_id), headers={**alice, "Last-Event-ID": bad}
        )
        assert response.status_code == 400, bad
        assert response.json()["error"]["code"] == "invalid_request"
    assert (await client.get(resume_url("conv_nope"), headers=alice)).status_code == 404
    assert (await client.post(resume_url(conversation_id), headers=alice)).status_code == 405


async def test_stop_with_nothing_running_is_409_and_strangers_get_404(
    client: httpx.AsyncClient, store: InMemoryConversationStore
) -> None:
    live = parse_sse((await client.post(URL, headers=SSE, json={"text": "hello"})).text)
    conversation_id = live[0][2]["conversationId"]
    stop = f"/api/spark/agent/conversations/{conversation_id}/stop"
    before = dict(store.writes)
    idle = await client.post(stop, headers={"Authorization": "Bearer alice-token"})
    assert idle.status_code == 409 and idle.json()["error"]["code"] == "no_active_run"
    stranger = await client.post(stop, headers={"Authorization": "Bearer bob-token"})
    assert stranger.status_code == 404
    assert store.writes == before


@pytest.mark.leaves_steps("refused before any model call")
async def test_errors_carry_a_request_id_users_can_quote(client: httpx.AsyncClient) -> None:
    plain = await client.post(URL, headers=SSE, content=b"{nope")
    assert plain.json()["error"]["requestId"].startswith("req_")
    traced = await client.post(
        URL,
        headers={**SSE, "X-Cloud-Trace-Context": "105445aa7843bc8bf206b12000100000/1;o=1"},
        content=b"{nope",
    )
    assert traced.json()["error"]["requestId"] == "105445aa7843bc8bf206b12000100000"


async def test_a_provider_refusal_never_stores_what_the_provider_said() -> None:
    rejected = ProviderRejected(
        "The model provider refused this request; please try again later.",
        detail="401: Incorrect API key provided: sk-abc***xyz",
    )
    store = InMemoryConversationStore()
    service = make_service(ScriptedProvider([Step(error=rejected)]), store)
    run = await service.start(ALICE, "hello")
    await run.execute()
    stored = await store.get("alice", run.conversation_id)
    assert stored is not None
    assert "sk-abc" not in stored.model_dump_json()
    error = stored.messages[-1].error
    assert error is not None and error.code == "provider_rejected"


@pytest.mark.leaves_steps("refused before any model call")
async def test_reserved_ids_are_not_found_and_deep_json_is_a_bad_request(
    client: httpx.AsyncClient,
) -> None:
    alice = {"Authorization": "Bearer alice-token"}
    assert (await client.get(resume_url("__x__"), headers=alice)).status_code == 404
    body = await client.post(URL, headers=SSE, json={"text": "hi", "conversationId": "__x__"})
    assert body.status_code in (400, 404)
    deep = b'{"text": "hi", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = await client.post(URL, headers=SSE, content=deep)
    assert response.status_code == 400 and "nests deeper" in response.json()["error"]["message"]
    nested = b'{"text": "hi", "x": ' + b"[" * 40 + b"]" * 40 + b"}"
    response = await client.post(URL, headers=SSE, content=nested)
    assert response.status_code == 400 and "nests deeper" in response.json()["error"]["message"]


@pytest.mark.leaves_steps("refused before any model call")
async def test_huge_integers_and_non_finite_numbers_are_bad_requests_not_errors(
    client: httpx.AsyncClient,
) -> None:
    for raw in (
        b'{"text": "hi", "x": ' + b"9" * 5000 + b"}",
        b'{"text": "hi", "x": NaN}',
        b'{"text": "hi", "x": -Infinity}',
    ):
        response = await client.post(URL, headers=SSE, content=raw)
        assert response.status_code == 400, raw[:40]
        assert response.json()["error"]["code"]


@pytest.mark.leaves_steps("refused before any model call")
async def test_a_reserved_conversation_id_is_not_found_on_either_path(
    client: httpx.AsyncClient,
) -> None:
    for headers in (SSE, {"Authorization": "Bearer alice-token"}):
        body = {"text": "hi", "conversationId": "__x__"}
        response = await client.post(URL, headers=headers, json=body)
        assert response.status_code == 404, response.text


def _get(path: str, token: str) -> Request:
    """A GET as the ASGI server hands it over (its response body is not read)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
    }
    return Request(scope)


async def _live_conversation(store: InMemoryConversationStore, uid: str) -> str:
    now = datetime.now(UTC)
    conversation = Conversation(
        id=f"conv_{uid}",
        participant_ids=[uid],
        created_at=now,
        updated_at=now,
        last_message_at=now,
        active_run=new_run("run_live", "msg_reply", now, now, None),
    )
    await store.create(uid, conversation)
    return conversation.id


@pytest.mark.leaves_steps("resumes stored runs; no model call")
async def test_resume_streams_per_user_are_capped_with_429_and_retry_after(
    store: InMemoryConversationStore, provider: ScriptedProvider
) -> None:
    service = make_service(provider, fakes=Fakes(store), resume_streams_per_user=2)
    api = api_of(service)
    alice = resume_url(await _live_conversation(store, "alice"))
    bob = resume_url(await _live_conversation(store, "bob"))
    first, second = [await api(_get(alice, "alice-token")) for _ in range(2)]
    assert isinstance(first, StreamingResponse) and isinstance(second, StreamingResponse)

    refused = await api(_get(alice, "alice-token"))
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    error = json.loads(bytes(refused.body))["error"]
    assert error["code"] == "rate_limited" and "2 " in error["message"]
    # Another user's streams are not counted against this one.
    assert (await api(_get(bob, "bob-token"))).status_code == 200

    # A stream that ends, and one whose response was dropped before it started, give
    # their places back.
    body = first.body_iterator
    assert b"event: run_start" in await anext(body)  # type: ignore[call-overload]
    await body.aclose()  # type: ignore[attr-defined]
    del first, body, second
    gc.collect()
    again = [await api(_get(alice, "alice-token")) for _ in range(2)]
    assert [r.status_code for r in again] == [200, 200]
    assert (await api(_get(alice, "alice-token"))).status_code == 429
