"""What a client reads, through the real app (issue 26, "Answers that mislead clients"):
a queued message says ``queued``, a 429's ``Retry-After`` is an honest estimate for the
limit that refused and its message names that limit, and a send that is refused
writes nothing at all, the user's ledger included."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from shared.clock import ManualClock
from shared.llm.base import Finish
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Usage
from tests.unit.helpers import ALICE, Fakes, Harness, api_of, make_service, serving

URL = "/api/spark/agent/messages"
AUTH = {"Authorization": "Bearer alice-token"}
SSE = {**AUTH, "Accept": "text/event-stream"}


async def live_run(service: Harness, clock: ManualClock, text: str = "hello") -> tuple[str, object]:
    """A conversation whose reply is being written (its model pauses 5 s)."""
    run = await service.start(ALICE, text)
    return run.conversation_id, asyncio.ensure_future(run.execute())


async def settle(clock: ManualClock, *work: object) -> None:
    pending = [w for w in work if isinstance(w, asyncio.Future)]
    while not all(w.done() for w in pending):
        await clock.advance(0.5)


@pytest.mark.leaves_steps("the queued message's reply is written by a task not run here")
@pytest.mark.parametrize("headers", [AUTH, SSE], ids=["202", "stream"])
async def test_a_message_that_waits_behind_a_live_run_answers_queued(
    headers: dict[str, str],
) -> None:
    clock = ManualClock()
    provider = ScriptedProvider([Step.reply("Thinking", delay=5), Step.reply("Next")], clock=clock)
    service = make_service(provider, clock=clock)
    conversation_id, live = await live_run(service, clock)
    body = {"text": "and then?", "conversationId": conversation_id, "whenBusy": "queue"}
    async with serving(api_of(service)) as client:
        answer = await client.post(URL, headers=headers, json=body)
        assert answer.status_code == 202
        assert answer.json()["status"] == "queued"
        waiting = await service.store.get("alice", conversation_id)
        assert waiting is not None and len(waiting.queued_messages or []) == 1
        await settle(clock, live)


@pytest.mark.leaves_steps("the reply is written by a task this test does not run")
async def test_a_202_send_that_does_not_wait_answers_accepted() -> None:
    service = make_service(ScriptedProvider([Step.reply("Hi")]))
    async with serving(api_of(service)) as client:
        answer = await client.post(URL, headers=AUTH, json={"text": "hello"})
    assert answer.status_code == 202 and answer.json()["status"] == "accepted"


@pytest.mark.leaves_steps("the refused send calls no model")
async def test_all_run_slots_taken_is_429_naming_the_limit_with_a_short_retry_after() -> None:
    clock = ManualClock()
    steps = [Step.reply(f"Reply {n}", delay=5) for n in range(3)]
    service = make_service(ScriptedProvider(steps, clock=clock), clock=clock)
    runs = [await live_run(service, clock, f"message {n}") for n in range(3)]
    async with serving(api_of(service)) as client:
        refused = await client.post(URL, headers=SSE, json={"text": "a fourth"})
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "rate_limited"
    # The limit it hit, by name and number, and what to do.
    assert "3 replies" in error["message"] and "at once" in error["message"]
    assert "wait for one to finish" in error["message"]
    # A slot frees when one of those replies ends (seconds), not when it would lapse
    # (10 minutes).
    assert 1 <= int(refused.headers["Retry-After"]) <= 5
    await settle(clock, *(live for _, live in runs))


async def test_the_daily_token_budget_asks_to_wait_until_midnight_utc() -> None:
    clock = ManualClock(datetime(2026, 1, 1, 22, 0, tzinfo=UTC))
    spent = Finish("stop", Usage(input_tokens=600, output_tokens=500))
    service = make_service(
        ScriptedProvider([Step([*Step.reply("Long.").events[:-1], spent])]),
        clock=clock,
        daily_tokens_per_user=1000,
    )
    async with serving(api_of(service)) as client:
        first = await client.post(URL, headers=SSE, json={"text": "use it up"})
        assert first.status_code == 200
        refused = await client.post(URL, headers=SSE, json={"text": "more please"})
    assert refused.status_code == 429
    assert "today's allowance" in refused.json()["error"]["message"]
    assert int(refused.headers["Retry-After"]) == 2 * 3600 + 1  # midnight (UTC)


@pytest.mark.leaves_steps("the refused send calls no model")
@pytest.mark.parametrize(
    "conversation_id", ["conv_missing", "__reserved__"], ids=["unknown", "reserved"]
)
@pytest.mark.parametrize("headers", [AUTH, SSE], ids=["202", "stream"])
async def test_a_send_to_an_unknown_conversation_writes_nothing_not_even_the_ledger(
    conversation_id: str, headers: dict[str, str]
) -> None:
    fakes = Fakes()
    service = make_service(ScriptedProvider([Step.reply("Hi")]), fakes=fakes)
    before = await fakes.ledger.get("alice")
    async with serving(api_of(service)) as client:
        refused = await client.post(
            URL, headers=headers, json={"text": "hi", "conversationId": conversation_id}
        )
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "not_found"
    assert fakes.store.writes == {}
    assert fakes.ledger.writes == 0
    assert await fakes.ledger.get("alice") == before
    assert fakes.queue.take() == []


@pytest.mark.leaves_steps("the refused send calls no model")
async def test_a_send_refused_for_a_live_run_writes_nothing_not_even_the_ledger() -> None:
    clock = ManualClock()
    provider = ScriptedProvider([Step.reply("Thinking", delay=5)], clock=clock)
    service = make_service(provider, clock=clock)
    conversation_id, live = await live_run(service, clock)
    writes = (service.fakes.ledger.writes, dict(service.store.writes))
    async with serving(api_of(service)) as client:
        refused = await client.post(
            URL, headers=SSE, json={"text": "again", "conversationId": conversation_id}
        )
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "run_in_progress"
    assert (service.fakes.ledger.writes, service.store.writes) == writes
    await settle(clock, live)


def test_too_many_tasks_waiting_asks_to_wait_until_the_soonest_running_lease_ends() -> None:
    from datetime import timedelta

    from shared.errors import RateLimited
    from shared.schemas.server import TaskLedger, TaskRecord
    from shared.tasks import ledger as ledgers

    t0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    policy = ledgers.LedgerPolicy(max_running=1, lease=timedelta(seconds=120), max_waiting=2)

    def record(task_id: str) -> TaskRecord:
        return TaskRecord(
            task_id=task_id,
            conversation_id="c1",
            tool_call_id=f"call-{task_id}",
            tool="create_lesson",
            display_text="Creating lesson",
            seq=0,
            status="queued",
            created_at=t0,
            updated_at=t0,
        )

    ledger = TaskLedger()
    for task_id in ("t1", "t2"):
        ledger, _ = ledgers.submit(ledger, record(task_id), t0, policy)
    later = t0 + timedelta(seconds=100)  # t1 runs; its lease ends 20 s from now
    with pytest.raises(RateLimited) as refused:
        ledgers.submit(ledger, record("t3"), later, policy)
    assert "2 background tasks" in refused.value.message
    assert "the most allowed at once" in refused.value.message
    assert refused.value.retry_after == 21


@pytest.mark.leaves_steps("refused before any model call")
@pytest.mark.parametrize(
    ("path", "body", "message", "field"),
    [
        (URL, {"text": "   "}, "text must not be blank", "text"),
        (URL, {}, "text (or voice) is required", "text"),
        (
            URL,
            {"text": "hi", "conversationId": "no spaces"},
            "conversationId must be 1 to 64 letters, digits, '-' or '_'",
            "conversationId",
        ),
        (
            URL,
            {"text": "hi", "whenBusy": "wait"},
            "whenBusy must be 'reject' or 'queue'",
            "whenBusy",
        ),
        (
            URL,
            {"text": "hi", "colour": "red"},
            "colour is not a field of this request; the fields here are conversationId, "
            "text, voice, documentId, attachments, whenBusy, targetUserId, targetFamily, input "
            "and voiceSessionId",
            "colour",
        ),
        (
            URL,
            {"text": "hi", "attachments": [{"storagePath": "a", "contentType": "image/png"}]},
            "attachments[0].sizeBytes is required",
            "attachments[0].sizeBytes",
        ),
        (URL, {"text": "é" * 16385}, "text must be at most 32 KiB (32,768 bytes of UTF-8)", "text"),
        (
            "/api/spark/agent/conversations/conv_1/answers",
            {"toolCallId": "call_1", "answers": {"x": "A"}},
            "the key 'x' of answers must be a question's number: one digit, from 0",
            "the key 'x' of answers",
        ),
        (
            "/api/spark/agent/conversations/conv_1/approvals",
            {"toolCallId": "call_1", "approved": "yes"},
            "approved must be true or false",
            "approved",
        ),
        (
            "/api/spark/lessons/lesson_1/restore",
            {"version": 0},
            "version must be at least 1",
            "version",
        ),
    ],
)
async def test_an_invalid_body_is_told_in_plain_words_with_the_validators_in_details(
    path: str, body: dict[str, object], message: str, field: str
) -> None:
    fakes = Fakes()
    service = make_service(ScriptedProvider([Step.reply("Hi")]), fakes=fakes)
    async with serving(api_of(service)) as client:
        refused = await client.post(path, headers=AUTH, json=body)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"] == f"The request body is not valid: {message}."
    # Plain words in the message; the validator's own in details, field by field.
    assert "pattern" not in error["message"] and "Input should" not in error["message"]
    assert field in [d["field"] for d in error["details"]]
    assert all(d["type"] and d["detail"] for d in error["details"])
    assert fakes.store.writes == {} and fakes.ledger.writes == 0


def _json_values() -> object:
    from hypothesis import strategies as st

    leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=8,
    )


def test_every_invalid_body_of_every_request_is_worded_by_us() -> None:
    """Whatever a client sends, the message is ours: no validator's phrasing in it."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from pydantic import BaseModel, ValidationError
    from spark_http.problems import invalid_body

    from shared.schemas import api

    models: list[type[BaseModel]] = [
        api.SendMessageRequest,
        api.AttachmentRef,
        api.UploadRequest,
        api.AnswersRequest,
        api.ApprovalRequest,
        api.ToolResultRequest,
        api.RestoreRequest,
    ]
    names = sorted({i.alias or n for m in models for n, i in m.model_fields.items()})
    pydantic_words = ("should", "Input", "pattern", "constrained", "[key]", "Value")
    # A field the client names is quoted back to it, so a made-up name must not itself
    # hold one of the words (Hypothesis draws string constants from this file, "[key]").
    unknown = st.text(max_size=5).filter(lambda k: not any(w in k for w in pydantic_words))

    @settings(max_examples=400, deadline=None)
    @given(
        st.sampled_from(models),
        st.dictionaries(st.sampled_from(names) | unknown, _json_values(), max_size=5),  # type: ignore[arg-type]
    )
    def check(model: type[BaseModel], body: dict[str, object]) -> None:
        try:
            model.model_validate(body)
        except ValidationError as exc:
            error = invalid_body(model, exc)
            assert error.message.startswith("The request body is not valid: ")
            for words in pydantic_words:
                assert words not in error.message, error.message
            assert error.details and all(d["field"] for d in error.details)

    check()
