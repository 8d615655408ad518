"""A person's conversations (DESIGN §15): renamed, rated and deleted through the api, on
the in-package fakes; every refusal changes nothing, and nothing in flight when a
conversation is deleted (a streaming run, a task) makes any of it again."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import zipfile
from typing import Any

import pytest

from shared.llm.base import Finish, ModelEvent, ModelRequest, TextDelta
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import ArchiveSegment, ContentPart, Message
from shared.schemas.tasks import TASK_PAYLOAD
from shared.tools.base import ToolContext, ToolRegistry
from shared.voice.speech import cache_path
from tests.unit.helpers import ALICE, Fakes, Harness, api_of, make_service, serving, until
from tests.unit.test_tasks import SlowArgs, calls, deliver_all, task_tool

ALICE_AUTH = {"Authorization": "Bearer alice-token"}
BOB_AUTH = {"Authorization": "Bearer bob-token"}
CONVERSATIONS = "/api/spark/agent/conversations"


async def talked(fakes: Fakes | None = None, reply: str = "Hello there!") -> tuple[Harness, str]:
    """Alice's conversation of one message and one reply."""
    service = make_service(ScriptedProvider([Step.reply(reply)]), fakes=fakes)
    sent = await service.agent.send(ALICE, "hello", None)
    assert sent.run is not None
    await sent.run.execute()
    return service, sent.conversation_id


def stored(service: Harness, conversation_id: str, user: str = "alice") -> Any:
    """The document as stored (a copy), or ``None``."""
    return service.store.document(user, conversation_id)


# -- rename -----------------------------------------------------------------------------


async def test_rename_gives_the_title_and_says_who_gave_it() -> None:
    service, cid = await talked()
    async with serving(api_of(service)) as client:
        answer = await client.patch(
            f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH, json={"title": "  Tides  "}
        )
    assert answer.status_code == 200
    assert answer.json() == {"conversation": {"id": cid, "title": "Tides", "titleSource": "user"}}
    document = stored(service, cid)
    assert (document["title"], document["titleSource"]) == ("Tides", "user")


@pytest.mark.parametrize(
    "body",
    [
        {"title": ""},
        {"title": "   "},
        {"title": "x" * 121},
        {"title": "two\nlines"},
        {"title": 5},
        {},
        {"title": "ok", "extra": 1},
    ],
)
async def test_rename_refuses_a_bad_title_and_changes_nothing(body: dict[str, Any]) -> None:
    service, cid = await talked()
    before = stored(service, cid)
    async with serving(api_of(service)) as client:
        answer = await client.patch(f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH, json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_request"
    assert stored(service, cid) == before


async def test_rename_takes_120_characters() -> None:
    service, cid = await talked()
    async with serving(api_of(service)) as client:
        answer = await client.patch(
            f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH, json={"title": "é" * 120}
        )
    assert answer.status_code == 200
    assert stored(service, cid)["title"] == "é" * 120


async def test_rename_of_what_is_not_the_callers_is_404_and_changes_nothing() -> None:
    service, cid = await talked()
    before = stored(service, cid)
    async with serving(api_of(service)) as client:
        foreign = await client.patch(
            f"{CONVERSATIONS}/{cid}", headers=BOB_AUTH, json={"title": "Mine now"}
        )
        unknown = await client.patch(
            f"{CONVERSATIONS}/conv_nothing", headers=ALICE_AUTH, json={"title": "Hi"}
        )
        stranger = await client.patch(f"{CONVERSATIONS}/{cid}", json={"title": "Hi"})
    assert (foreign.status_code, unknown.status_code) == (404, 404)
    assert foreign.json()["error"]["code"] == "not_found"
    assert stranger.status_code == 401
    assert stored(service, cid) == before
    assert stored(service, cid, "bob") is None and stored(service, "conv_nothing") is None


# -- feedback ---------------------------------------------------------------------------


def reply_of(service: Harness, cid: str) -> str:
    (reply,) = [m for m in stored(service, cid)["messages"] if m["role"] == "assistant"]
    return str(reply["id"])


async def test_feedback_is_kept_on_the_reply_for_its_author() -> None:
    service, cid = await talked()
    reply = reply_of(service, cid)
    url = f"{CONVERSATIONS}/{cid}/messages/{reply}/feedback"
    async with serving(api_of(service)) as client:
        down = await client.put(url, headers=ALICE_AUTH, json={"rating": "down", "comment": "Off"})
        up = await client.put(url, headers=ALICE_AUTH, json={"rating": "up"})
    assert (down.status_code, up.status_code) == (200, 200)
    assert down.json()["feedback"]["rating"] == "down"
    assert down.json()["feedback"]["comment"] == "Off"
    assert up.json()["messageId"] == reply and up.json()["conversationId"] == cid
    conversation = await service.store.get("alice", cid)
    assert conversation is not None
    kept = conversation.message(reply)
    assert kept is not None and kept.feedback is not None
    assert (kept.feedback.rating, kept.feedback.comment) == ("up", None)
    # Kept server-side too, for quality review: one record per reply, the latest.
    (record,) = await service.fakes.feedback.of("alice")
    assert (record.conversation_id, record.message_id) == (cid, reply)
    assert (record.rating, record.comment, record.at) == ("up", None, kept.feedback.at)


async def test_feedback_records_go_with_their_conversation_and_into_the_export() -> None:
    fakes = Fakes()
    service, cid = await talked(fakes)
    url = f"{CONVERSATIONS}/{cid}/messages/{reply_of(service, cid)}/feedback"
    async with serving(api_of(service)) as client:
        assert (await client.put(url, headers=ALICE_AUTH, json={"rating": "down"})).is_success
        exported = await client.get("/api/spark/me/export", headers=ALICE_AUTH)
        assert exported.status_code == 200
        with zipfile.ZipFile(io.BytesIO(exported.content)) as archive:
            ratings = json.loads(archive.read("feedback.json"))
        assert [(r["conversationId"], r["rating"]) for r in ratings] == [(cid, "down")]
        assert (await client.delete(f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH)).is_success
    assert await fakes.feedback.of("alice") == []


@pytest.mark.parametrize(
    ("body", "message", "auth", "status"),
    [
        ({"rating": "meh"}, "reply", ALICE_AUTH, 400),
        ({"rating": "up", "comment": "x" * 2001}, "reply", ALICE_AUTH, 400),
        ({"rating": "up", "stars": 5}, "reply", ALICE_AUTH, 400),
        ({"rating": "up"}, "question", ALICE_AUTH, 400),
        ({"rating": "up"}, "msg_unknown", ALICE_AUTH, 404),
        ({"rating": "up"}, "reply", BOB_AUTH, 404),
        ({"rating": "up"}, "__reserved__", ALICE_AUTH, 404),
    ],
)
async def test_feedback_refused_changes_nothing(
    body: dict[str, Any], message: str, auth: dict[str, str], status: int
) -> None:
    service, cid = await talked()
    document = stored(service, cid)
    ids = {m["role"]: m["id"] for m in document["messages"]}
    target = {"reply": ids["assistant"], "question": ids["user"]}.get(message, message)
    async with serving(api_of(service)) as client:
        answer = await client.put(
            f"{CONVERSATIONS}/{cid}/messages/{target}/feedback", headers=auth, json=body
        )
    assert answer.status_code == status
    assert stored(service, cid) == document


# -- delete -----------------------------------------------------------------------------


def with_file(message_id: str, path: str) -> Message:
    return Message(
        id=message_id,
        role="user",
        created_at="2026-03-01T00:00:00Z",  # type: ignore[arg-type]
        status="complete",
        content=[
            ContentPart.of_text("see this"),
            ContentPart.model_validate(
                {
                    "type": "file",
                    "file": {
                        "storagePath": path,
                        "contentType": "application/pdf",
                        "sizeBytes": 3,
                        "textPath": path + ".txt",
                    },
                }
            ),
        ],
    )


async def test_delete_removes_the_conversation_and_all_kept_of_it_then_204_again() -> None:
    fakes = Fakes()
    service, cid = await talked(fakes)
    other_service_cid = (await service.agent.send(ALICE, "another", None)).conversation_id
    files = fakes.files
    for path in ("alice/uploads/a.pdf", "alice/uploads/a.pdf.txt", "alice/uploads/old.pdf"):
        await files.write(path, b"pdf", "application/pdf")
    await files.write("alice/uploads/old.pdf.txt", b"txt", "text/plain")
    await files.write("alice/uploads/kept.pdf", b"pdf", "application/pdf")
    await files.write(cache_path("alice", cid, "msg_1", "voice"), b"mp3", "audio/mpeg")
    await files.write(cache_path("alice", other_service_cid, "m", "voice"), b"mp3", "audio/mpeg")
    await service.store.mutate(
        "alice",
        cid,
        lambda c: c.model_copy(
            update={"messages": [*c.messages, with_file("msg_f", "alice/uploads/a.pdf")]}
        ),
    )
    old = ArchiveSegment(
        conversation_id=cid,
        segment=1,
        messages=[with_file("msg_old", "alice/uploads/old.pdf")],
        created_at="2026-03-01T00:00:00Z",  # type: ignore[arg-type]
    )
    await service.store.archive("alice", old)
    async with serving(api_of(service)) as client:
        first = await client.delete(f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH)
        again = await client.delete(f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH)
        renamed = {"title": "x"}
        after = await client.patch(f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH, json=renamed)
    assert (first.status_code, again.status_code) == (204, 204)
    assert first.content == b""
    assert after.status_code == 404
    assert stored(service, cid) is None
    assert await service.store.segments("alice", cid) == []
    assert await service.store.archived_file("alice", cid, "alice/uploads/old.pdf") == []
    assert files.paths() == sorted(
        ["alice/uploads/kept.pdf", cache_path("alice", other_service_cid, "m", "voice")]
    )
    assert stored(service, other_service_cid) is not None  # another conversation stays


async def test_delete_of_what_is_not_the_callers_is_404_and_changes_nothing() -> None:
    service, cid = await talked()
    before = stored(service, cid)
    ledger = await service.fakes.ledger.get("alice")
    async with serving(api_of(service)) as client:
        foreign = await client.delete(f"{CONVERSATIONS}/{cid}", headers=BOB_AUTH)
        unknown = await client.delete(f"{CONVERSATIONS}/conv_nothing", headers=ALICE_AUTH)
        stranger = await client.delete(f"{CONVERSATIONS}/{cid}")
        reserved = await client.delete(f"{CONVERSATIONS}/__x__", headers=ALICE_AUTH)
    assert (foreign.status_code, unknown.status_code, reserved.status_code) == (404, 404, 404)
    assert foreign.json()["error"]["code"] == "not_found"
    assert stranger.status_code == 401
    assert stored(service, cid) == before
    assert await service.fakes.ledger.get("alice") == ledger
    assert service.store.tombstones == {}


# -- nothing in flight makes a deleted conversation again ---------------------------------


AFTER = 10_000


class Paused(ScriptedProvider):
    """Streams a first word, then waits for ``go`` before ``AFTER`` more (each handed
    over only when asked for: ``read`` counts them)."""

    def __init__(self) -> None:
        super().__init__([])
        self.go = asyncio.Event()
        self.read = 0

    async def stream(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        first: list[ModelEvent] = [TextDelta("Hello")]
        for event in first:
            yield event
        await self.go.wait()
        for _ in range(AFTER):
            self.read += 1
            yield TextDelta(" more")
            await asyncio.sleep(0)
        yield Finish("stop")


@pytest.mark.parametrize("throttle_ms", [0, 3_600_000])
async def test_a_delete_while_a_reply_streams_is_never_undone_by_the_run(throttle_ms: int) -> None:
    """The run's next throttled write (``throttle_ms`` 0: one per word) or, with none
    (an hour's throttle), its closing write finds the conversation gone: nothing is
    made again, the run ends and its slot is free. Its next write refused, the run
    stops reading the model."""
    provider = Paused()
    service = make_service(provider, throttle_ms=throttle_ms)
    sent = await service.agent.send(ALICE, "hello", None)
    run, cid = sent.run, sent.conversation_id
    assert run is not None
    running = asyncio.create_task(run.execute())
    await until(lambda: len(provider.requests) == 1, "the model is asked")
    if throttle_ms == 0:
        await until(
            lambda: "Hello" in str((stored(service, cid) or {}).get("activeRun")), "a word saved"
        )
    async with serving(api_of(service)) as client:
        deleted = await client.delete(f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH)
    assert deleted.status_code == 204
    writes = copy.deepcopy(service.store.writes)
    provider.go.set()
    await running
    assert stored(service, cid) is None
    assert service.store.writes == writes  # not one write landed after the delete
    assert (await service.fakes.ledger.get("alice")).runs == {}  # its slot is free
    if throttle_ms == 0:
        assert provider.read < AFTER


class Gate:
    """A task tool that reports a step, then waits for ``go`` (and reports another
    step, with ``step_after``) before it gives its result."""

    def __init__(self, step_after: bool) -> None:
        self.started = asyncio.Event()
        self.go = asyncio.Event()
        self.step_after = step_after

    async def __call__(self, args: SlowArgs, context: ToolContext) -> dict[str, str]:
        await context.progress("Reading the brief")
        self.started.set()
        await self.go.wait()
        if self.step_after:
            await context.progress("Writing the lesson")
        return {"lesson": f"A lesson on {args.topic}"}


@pytest.mark.parametrize("step_after", [False, True])
async def test_a_delete_while_a_task_runs_is_never_undone_by_the_task(step_after: bool) -> None:
    """The task's progress, its result and the agent's follow-up all find the
    conversation gone: no document, no section, no follow-up model call, and the task
    ends (its slot free) and leaves the ledger."""
    tool = Gate(step_after)
    provider = ScriptedProvider([calls(("make_lesson", "c1"))])
    fakes = Fakes()
    service = make_service(provider, fakes=fakes, tools=ToolRegistry([task_tool(tool)]))
    sent = await service.agent.send(ALICE, "a lesson on tides", None)
    assert sent.run is not None
    await sent.run.execute()
    cid = sent.conversation_id
    delivering = asyncio.create_task(deliver_all(service, fakes.queue))
    await asyncio.wait_for(tool.started.wait(), 30)
    async with serving(api_of(service)) as client:
        deleted = await client.delete(f"{CONVERSATIONS}/{cid}", headers=ALICE_AUTH)
    assert deleted.status_code == 204
    assert await fakes.sections.recent("alice") == []
    tool.go.set()
    await delivering
    assert stored(service, cid) is None
    assert await fakes.sections.recent("alice") == []
    assert len(provider.requests) == 1  # no follow-up was asked of the model
    ledger = await fakes.ledger.get("alice")
    # The task ended, and its record left the ledger as its section went: nothing of
    # the conversation stays (its slot is free).
    assert ledger.tasks == {}
    assert ledger.runs == {}


async def test_a_queued_reply_delivered_after_its_conversation_was_deleted_is_done() -> None:
    """A background send's reply task, delivered once its conversation was deleted (by
    its owner, or an erasure): done, making nothing again and asking no model. It was a
    404, which the queue would have delivered again until its attempts ran out (found
    by ``test_data_life_property.py``)."""
    provider = ScriptedProvider([])
    fakes = Fakes()
    service = make_service(provider, fakes=fakes)
    sent = await service.agent.send(ALICE, "hello", None, background=True)
    cid = sent.conversation_id
    (reply,) = [t for t in fakes.queue.take() if t.name.startswith("reply-")]
    await service.agent.delete_conversation("alice", cid)
    writes = copy.deepcopy(service.store.writes)
    verdict = await service.handler().handle(TASK_PAYLOAD.validate_json(reply.body))
    assert verdict == "done"
    assert stored(service, cid) is None and service.store.writes == writes
    assert provider.requests == []
    assert (await fakes.ledger.get("alice")).runs == {}
