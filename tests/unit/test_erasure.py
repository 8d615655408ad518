"""Erasing an account (DESIGN §15) on the in-package fakes: the routes' answers (a
refusal changes nothing), an erasure run to its end in pages leaving nothing of the
account but the others' copies, those copies marked ``author.deleted`` and withheld from
the others' models, an erasure killed half way that resumes, and a parent's erasure of
a dependent."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from spark_http.app import ApiApp

from shared.auth.accounts import InMemoryAccounts
from shared.auth.base import StaticTokenVerifier, User
from shared.clock import ManualClock
from shared.erasure.steps import Eraser, ErasureParts
from shared.errors import AccountDeleted, StoreError
from shared.families.messages import Target, family_conversation_id
from shared.llm.base import Finish, ModelRequest, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.queue.base import QueuedTask
from shared.queue.memory import InMemoryTaskQueue
from shared.schemas.deletions import Deletion, deletion_id_of, uid_hash
from shared.schemas.documents import Conversation, Lesson, TaskDocument
from shared.schemas.server import RunSlot, TaskLedger, TaskRecord
from shared.schemas.tasks import TASK_PAYLOAD, EraseTask
from shared.store.memory.accounts import InMemoryAccountStore
from tests.unit.helpers import Fakes, Harness, make_service, run_frames, serving

MUM = User(uid="mum", name="Mum")
DAD = User(uid="dad", name="Dad")
KID = User(uid="kid", name="Kid")
NOW = datetime(2026, 3, 1, tzinfo=UTC)
DINNER = "Dinner is at seven tonight, everyone home please."
PRIVATE = "Dad here: the spare key is under the blue pot."
CONFIRM = {"confirm": "delete my account"}
BODY = "<lesson>\n<h1>Tides</h1>\n<p>The sea rises and falls.</p>\n</lesson>"


def calls(name: str, args: dict[str, object]) -> Step:
    return Step([ToolCallRequest("p0", name, json.dumps(args)), Finish("tool_calls")])


def everything(request: ModelRequest) -> str:
    turns = [(t.text, [c.arguments for c in t.tool_calls]) for t in request.messages]
    return json.dumps([request.system, turns], ensure_ascii=False)


async def household(provider: ScriptedProvider, fakes: Fakes | None = None) -> Harness:
    """Mum and Dad (parents) and Kid (a dependent) in one family."""
    harness = make_service(provider, fakes=fakes or Fakes())
    families = harness.agent.families
    family = await families.create(MUM, "The Smiths")
    for user, role in ((DAD, "parent"), (KID, "dependent")):
        made = await families.invite("mum", family.id, role)  # type: ignore[arg-type]
        await families.join(user, made.token)
    return harness


async def erase_to_end(harness: Harness) -> int:
    """Deliver the queue's erase tasks (and what they enqueue) until none is left: how
    many were delivered."""
    delivered = 0
    while tasks := [t for t in harness.fakes.queue.take() if t.name.startswith("erase-")]:
        for task in tasks:
            assert await harness.handler().handle(TASK_PAYLOAD.validate_json(task.body)) == "done"
            delivered += 1
    return delivered


def accounts_of(harness: Harness) -> InMemoryAccountStore:
    store = harness.deps.tombstones._accounts  # type: ignore[attr-defined]
    assert isinstance(store, InMemoryAccountStore)
    return store


async def give_dad_an_account(harness: Harness) -> None:
    """An agent conversation, a lesson, a task with its section, files, settings, an
    invite he made, and messages to the family and to Mum."""
    fakes, agent = harness.fakes, harness.agent
    await run_frames(harness, DAD, "hello")
    lesson = Lesson(id="les_1", title="Tides", body=BODY, version=1, created_at=NOW, updated_at=NOW)
    await fakes.lessons.create("dad", lesson)
    record = TaskRecord(
        task_id="task_1",
        conversation_id="c_gone",
        tool_call_id="call_1",
        tool="create_lesson",
        display_text="Creating lesson",
        seq=0,
        status="queued",
        created_at=NOW,
        updated_at=NOW,
    )
    await fakes.ledger.mutate(
        "dad", lambda led: led.model_copy(update={"tasks": {**led.tasks, "task_1": record}})
    )
    section = TaskDocument(
        id="task_1",
        conversation_id="c_gone",
        tool_call_id="call_1",
        tool="create_lesson",
        title="Creating lesson",
        status="queued",
        created_at=NOW,
        updated_at=NOW,
    )
    fakes.sections.put("dad", {"task_1": section})
    for n in range(3):
        await fakes.files.write(f"dad/uploads/f{n}.png", b"png", "image/png")
    await fakes.files.write("mum/uploads/keep.png", b"png", "image/png")
    await agent.preferences.update("dad", ai_reads_family_messages=True)
    family = await agent.families.current("dad")
    await agent.families.invite("dad", family.id, "dependent")
    await agent.delivery.deliver("dad", DINNER, Target(family=True))
    await agent.delivery.deliver("dad", PRIVATE, Target(user_id="mum"))


# -- the routes -------------------------------------------------------------------------


@pytest.fixture
async def world() -> AsyncIterator[tuple[Harness, httpx.AsyncClient]]:
    harness = await household(ScriptedProvider([]))
    users = {"mum": MUM, "dad": DAD, "kid": KID, "eve": User(uid="eve")}
    verifier = StaticTokenVerifier({f"{k}-token": v for k, v in users.items()})
    async with serving(ApiApp(harness.agent, verifier, harness.settings)) as client:
        yield harness, client


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {name}-token"}


async def test_http_erase_me_is_202_with_the_deletion_id_and_a_task(
    world: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = world
    answer = await client.request("DELETE", "/api/spark/me", headers=auth("eve"), json=CONFIRM)
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"deletionId": deletion_id_of("eve")}
    assert [t.name for t in harness.fakes.queue.take()] == [f"erase-{deletion_id_of('eve')}-0"]
    again = await client.request("DELETE", "/api/spark/me", headers=auth("eve"), json=CONFIRM)
    assert again.status_code == 202 and again.json() == answer.json()


@pytest.mark.parametrize("body", [{}, {"confirm": "delete my acount"}, {"confirm": "yes"}])
async def test_http_a_wrong_confirmation_is_400_and_changes_nothing(
    world: tuple[Harness, httpx.AsyncClient], body: dict[str, Any]
) -> None:
    harness, client = world
    answer = await client.request("DELETE", "/api/spark/me", headers=auth("dad"), json=body)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"
    assert accounts_of(harness).documents == {} and harness.fakes.queue.take() == []


async def test_http_the_last_parent_of_a_family_with_others_is_409_and_nothing_changes(
    world: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = world
    family = await harness.agent.families.current("mum")
    await harness.agent.families.remove("mum", family.id, "dad")
    before = dict(harness.fakes.families.documents)
    answer = await client.request("DELETE", "/api/spark/me", headers=auth("mum"), json=CONFIRM)
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "last_parent"
    assert accounts_of(harness).documents == {} and harness.fakes.queue.take() == []
    assert harness.fakes.families.documents == before


async def test_http_a_dependents_account_is_erased_by_a_parent_only(
    world: tuple[Harness, httpx.AsyncClient],
) -> None:
    harness, client = world
    family = await harness.agent.families.current("mum")
    path = f"/api/spark/families/{family.id}/members/{{}}/account"
    for who, member in (("kid", "kid"), ("eve", "kid"), ("mum", "dad"), ("mum", "eve")):
        refused = await client.request(
            "DELETE", path.format(member), headers=auth(who), json=CONFIRM
        )
        assert refused.status_code == 404, (who, member, refused.text)
    elsewhere = "/api/spark/families/fam_other/members/kid/account"
    assert (
        await client.request("DELETE", elsewhere, headers=auth("mum"), json=CONFIRM)
    ).status_code == 404
    assert accounts_of(harness).documents == {} and harness.fakes.queue.take() == []
    answer = await client.request("DELETE", path.format("kid"), headers=auth("dad"), json=CONFIRM)
    assert answer.status_code == 202 and answer.json() == {"deletionId": deletion_id_of("kid")}
    await erase_to_end(harness)
    deletion = await accounts_of(harness).deletion(deletion_id_of("kid"))
    assert deletion is not None and deletion.step == "finished"
    assert deletion.requested_by == "parent"
    assert await accounts_of(harness).listed("kid", 1000) == []
    members = (await harness.agent.families.current("mum")).members
    assert [m.user_id for m in members] == ["mum", "dad"]


# -- an erasure to its end ------------------------------------------------------------


async def test_an_erasure_leaves_nothing_of_the_account_but_the_others_marked_copies() -> None:
    provider = ScriptedProvider(
        [
            Step.reply("Hello Dad."),
            calls("read_family_messages", {}),
            Step.reply("Dad said dinner is at seven."),
            Step.reply("Yes, at seven."),
            calls("read_family_messages", {}),
            Step.reply("Nothing new from Dad."),
        ]
    )
    fakes = Fakes(auth=InMemoryAccounts({"mum", "dad", "kid"}))
    harness = await household(provider, fakes)
    await give_dad_an_account(harness)
    conversation_id, _ = await run_frames(harness, MUM, "what did my family say?")
    assert DINNER in everything(provider.requests[2])
    seen = len(provider.requests)
    accounts = accounts_of(harness)
    assert await accounts.listed("dad", 1000)

    await harness.agent.erase_account("dad")
    with pytest.raises(AccountDeleted):
        await harness.agent.send(DAD, "one more thing", None)
    await erase_to_end(harness)

    deletion = await accounts.deletion(deletion_id_of("dad"))
    assert deletion is not None and deletion.step == "finished"
    assert deletion.finished_at is not None and deletion.uid_hash == uid_hash("dad")
    assert "dad" not in json.dumps(deletion.to_firestore(), default=str)
    assert deletion.counts.files == 3 and deletion.counts.documents >= 10
    assert fakes.auth.deleted == ["dad"] and fakes.auth.user_ids == {"mum", "kid"}
    assert await accounts.listed("dad", 10_000) == []
    assert [p for p in fakes.files.paths() if p.startswith("dad/")] == []
    assert fakes.files.paths() == ["mum/uploads/keep.png"]
    assert _orphans(harness, ("mum", "kid")) == []
    family = await harness.agent.families.current("mum")
    assert [m.user_id for m in family.members] == ["mum", "kid"]
    assert family.invite_ids and all(
        i.created_by != "dad"
        for i in await harness.agent.families.invites("mum", family.id)
        for i in [i.invite]
    )
    # The others' copies keep what Dad wrote, marked.
    family_id = family_conversation_id(family.id)
    for owner in ("mum", "kid"):
        copy = await harness.store.get(owner, family_id)
        assert copy is not None
        dads = [m for m in copy.messages if m.author and m.author.user_id == "dad"]
        assert len(dads) == 1 and dads[0].author is not None and dads[0].author.deleted
    direct = [c for c in await _copies(harness, "mum") if c.kind == "direct"]
    assert len(direct) == 1 and all(
        m.author.deleted for m in direct[0].messages if m.author and m.author.user_id == "dad"
    )

    # Mum's agent is given nothing of Dad's any more: its history, and a new read.
    await run_frames(harness, MUM, "say that again", conversation_id)
    await run_frames(harness, MUM, "read them again", conversation_id)
    later = provider.requests[seen:]
    assert len(later) == 3
    for request in later:
        assert DINNER not in everything(request) and PRIVATE not in everything(request)


async def _copies(harness: Harness, user_id: str) -> list[Conversation]:
    paths = await accounts_of(harness).listed(user_id, 10_000)
    found = [
        await harness.store.get(user_id, p[3])
        for p in paths
        if len(p) == 4 and p[1:3] == ("client", "conversations")
    ]
    return [c for c in found if c is not None]


def _orphans(harness: Harness, others: tuple[str, ...]) -> list[str]:
    """Every stored document outside the erased user's own that still names them, but
    the documented ones: the others' copies of shared conversations, and what their
    models were given (provenance: kept to withhold it)."""
    fakes, found = harness.fakes, []
    kept = (("client", "conversations"), ("server", "provenance"))
    by_path = {**fakes.families.documents, **fakes.settings.documents, **fakes.provenance.documents}
    for path, document in by_path.items():
        if path[0] == "dad" or (
            # As a value, not a substring: a random hash ("…dad9…") names nobody.
            '"dad"' in json.dumps(document, default=str) and path[1:3] not in kept
        ):
            found.append("/".join(path))
    for uid in others:
        ledger = json.dumps(
            TaskLedger.model_validate(fakes.ledger._documents.get(uid) or {}).to_firestore(),
            default=str,
        )
        if '"dad"' in ledger:
            found.append(f"{uid}/server")
    return found


class EveryEnqueue(InMemoryTaskQueue):
    """A queue that keeps every task enqueued, a name seen before too: the local Cloud
    Tasks emulator does not de-duplicate names."""

    async def enqueue(self, task: QueuedTask) -> None:
        self.tasks.append(task)


class Interleaved:
    """The account store, but a read of the record lets other deliveries run before the
    reader goes on (as two processes reading one record at once)."""

    def __init__(self, inner: InMemoryAccountStore) -> None:
        self._inner = inner

    async def deletion(self, deletion_id: str) -> Deletion | None:
        found = await self._inner.deletion(deletion_id)
        await asyncio.sleep(0)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_an_erasure_killed_half_way_and_redelivered_resumes_and_finishes() -> None:
    harness = make_service(ScriptedProvider([]), fakes=Fakes(queue=EveryEnqueue()))
    fakes, accounts = harness.fakes, accounts_of(harness)
    for n in range(95):
        conversation = Conversation(
            id=f"c{n:03d}",
            participant_ids=["dad"],
            created_at=NOW,
            updated_at=NOW,
            last_message_at=NOW,
        )
        await fakes.store.create("dad", conversation)
    for n in range(30):
        await fakes.files.write(f"dad/uploads/f{n:02d}.png", b"png", "image/png")
    parts: ErasureParts = harness.agent._eraser._parts  # type: ignore[union-attr]
    eraser = Eraser(replace(parts, page=20, accounts=Interleaved(accounts)))  # type: ignore[arg-type]
    await harness.agent.erase_account("dad")
    # The store fails in the third page of documents (each page: 20 deletes and the record).
    accounts.fail_after = accounts.writes + 2 + 2 * 21 + 5
    queue, killed = fakes.queue.take(), None
    while queue and killed is None:
        task = queue.pop(0)
        try:
            await eraser.step(EraseTask.model_validate_json(task.body))
        except StoreError:
            killed = task
        queue += fakes.queue.take()
    assert killed is not None
    halfway = await accounts.deletion(deletion_id_of("dad"))
    assert halfway is not None and halfway.step == "documents"
    assert halfway.counts.documents == 40 and len(await accounts.listed("dad", 1000)) == 55

    accounts.fail_after = None
    # Redelivered, twice at once (the local emulator does not de-duplicate names), and
    # what they enqueue delivered at once too, round after round.
    queue, deliveries = [killed, killed], 0
    while queue:
        await asyncio.gather(*(eraser.step(EraseTask.model_validate_json(t.body)) for t in queue))
        deliveries += len(queue)
        queue = fakes.queue.take()
    done = await accounts.deletion(deletion_id_of("dad"))
    assert done is not None and done.step == "finished"
    assert (done.counts.documents, done.counts.files) == (95, 30)
    assert done.counts.pages == math.ceil(95 / 20) + math.ceil(30 / 20)
    # Each commit is one step of the record: the pages and six moves between steps.
    assert accounts.commits == done.version == done.counts.pages + 6
    assert accounts.writes == 1 + 95 + accounts.commits  # the record begun, each doc once
    # The two chains of tasks became one: a delivery that lost its step's race stopped.
    assert deliveries <= accounts.commits - halfway.version + 2
    assert await accounts.listed("dad", 1000) == [] and fakes.files.paths() == []


async def test_a_send_after_the_erasure_began_creates_nothing() -> None:
    harness = make_service(ScriptedProvider([]))
    await harness.agent.erase_account("dad")
    with pytest.raises(AccountDeleted):
        await harness.agent.send(DAD, "hello again", None)
    with pytest.raises(AccountDeleted):
        await harness.agent.send(DAD, "a chat of my own id", "chat_1", create=True)
    assert await accounts_of(harness).listed("dad", 10) == []


async def test_nothing_of_the_account_is_written_again_once_its_erasure_began() -> None:
    """A valid ID token outlives its account by up to an hour: every verb that would
    write under the account (settings, a family, an upload, a family message) is refused."""
    harness = await household(ScriptedProvider([]))
    agent = harness.agent
    await agent.erase_account("dad")
    await erase_to_end(harness)
    refused = (
        agent.update_settings("dad", ai_reads_family_messages=False),
        agent.create_family(DAD, "The Dads", None),
        agent.start_upload("dad", "work.png", "image/png", 100),
    )
    for attempt in refused:
        with pytest.raises(AccountDeleted):
            await attempt
    assert await accounts_of(harness).listed("dad", 10) == []
    assert harness.fakes.files.sessions == {}
    # Between the request and the family step, a message from the erased member is refused.
    await agent.erase_account("kid")
    with pytest.raises(AccountDeleted):
        await agent.deliver("kid", "still here?", Target(family=True))


async def test_an_erasure_waits_for_runs_and_tasks_still_going_then_goes_on() -> None:
    """A run whose slot is still held and a task whose tool is running: the erasure
    stops and cancels them, then waits (its task again, later) until neither is left
    going, before it deletes anything."""
    clock = ManualClock(NOW)
    harness = make_service(ScriptedProvider([]), clock=clock)
    fakes = harness.fakes
    until = NOW + timedelta(seconds=60)
    running = TaskRecord(
        task_id="task_1",
        conversation_id="c_live",
        tool_call_id="call_1",
        tool="create_lesson",
        display_text="Creating lesson",
        seq=0,
        status="running",
        started=True,
        attempt=1,
        lease_expires_at=until,
        created_at=NOW,
        updated_at=NOW,
    )
    ledger = TaskLedger(
        tasks={"task_1": running}, runs={"c_live": RunSlot(run_id="run_1", until=until)}
    )
    await fakes.ledger.mutate("dad", lambda _: ledger)
    await harness.agent.erase_account("dad")
    first = fakes.queue.take()
    await harness.handler().handle(TASK_PAYLOAD.validate_json(first[0].body))
    waiting = await accounts_of(harness).deletion(deletion_id_of("dad"))
    assert waiting is not None and (waiting.step, waiting.version) == ("stopping", 0)
    assert (await fakes.ledger.get("dad")).tasks["task_1"].cancel_requested
    later = fakes.queue.take()
    assert len(later) == 1 and later[0].schedule_at is not None and later[0].schedule_at > NOW
    assert later[0].name != first[0].name
    await clock.advance(61)
    await harness.handler().handle(TASK_PAYLOAD.validate_json(later[0].body))
    await erase_to_end(harness)
    done = await accounts_of(harness).deletion(deletion_id_of("dad"))
    assert done is not None and done.step == "finished"
    assert await accounts_of(harness).listed("dad", 10) == []


async def test_an_export_once_the_erasure_began_is_refused_and_writes_nothing() -> None:
    """An export records itself in the account's ledger (its ten minutes): asked for
    after the erasure began (a token outlives its account), it would leave
    ``{uid}/server`` behind the finished erasure (found by
    ``test_data_life_property.py``). Refused, for a parent's export of a dependent too."""
    harness = await household(ScriptedProvider([]))
    agent = harness.agent
    await agent.erase_account("dad")
    await erase_to_end(harness)
    with pytest.raises(AccountDeleted):
        await agent.export("dad")
    await agent.erase_account("kid")
    family = await agent.families.current("mum")
    with pytest.raises(AccountDeleted):
        await agent.export_dependent("mum", family.id, "kid")
    await erase_to_end(harness)
    assert await accounts_of(harness).listed("dad", 10) == []
    assert await accounts_of(harness).listed("kid", 10) == []
