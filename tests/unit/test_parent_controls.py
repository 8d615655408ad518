"""Parents' controls and consent (DESIGN §16), at the fakes' wire: a dependent whose
parent withdrew consent for a processor, or who sends in quiet hours or past the daily
limit, causes no call to it (counted at the fake provider, moderator, speaker and
transcriber) on every path; the route is for a family's parents, for a dependent, and
changes nothing else; the dependent reads their controls in their mirror, and their
conversations open with a line saying they talk to an AI and what their parents see."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from spark_http.app import ApiApp

from shared.auth.base import StaticTokenVerifier, User
from shared.clock import ManualClock
from shared.config import Settings
from shared.egress.controls import quiet_now
from shared.errors import ParentControls
from shared.families.audit import family_violations
from shared.ids import SequentialIds
from shared.llm.base import ChatMessage, ModelRequest
from shared.llm.moderation import ScriptedModerator, Verdict
from shared.llm.scripted import ScriptedProvider, Step
from shared.llm.transcribe import Clip, FakeTranscriber
from shared.schemas.documents import QuietHours
from shared.schemas.tasks import TASK_PAYLOAD
from shared.store.households import controls_mirror_path, family_path, mirror_path
from shared.voice.scripted import ScriptedVoice
from shared.wiring import assemble
from tests.unit.helpers import Fakes, Harness, serving
from tests.unit.test_family_tools import DAD, KID, MUM

USERS = {"mum": MUM, "dad": DAD, "kid": KID, "eve": User(uid="eve", name="Eve")}
FAMILIES = "/api/spark/families"
MESSAGES = "/api/spark/agent/messages"
ALL = {"chat": True, "speech": True, "transcription": True, "moderation": True}
NOON = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {name}-token"}


def streamed(name: str) -> dict[str, str]:
    """A send whose reply streams (SSE); without it, a task replies (202)."""
    return {**auth(name), "Accept": "text/event-stream"}


def clean(text: str) -> Verdict:
    return Verdict()


class World:
    """One family (Mum, Dad: parents; Kid: a dependent) on one process's fakes, with
    every processor a fake that counts its calls."""

    def __init__(
        self, steps: list[Step] | None = None, fakes: Fakes | None = None, **settings: int | str
    ) -> None:
        self.clock = ManualClock(NOON)
        self.fakes = fakes or Fakes()
        self.provider = ScriptedProvider(steps or [])
        self.moderator = ScriptedModerator(clean)
        self.voice = ScriptedVoice(self.clock)
        self.transcriber = FakeTranscriber("What is seven times eight?")
        configured = replace(Settings(), **settings)
        components = assemble(
            configured,
            self.fakes.store,
            self.fakes.ledger,
            self.fakes.lessons,
            self.fakes.queue,
            self.provider,
            self.clock,
            ids=SequentialIds(),
            system_prompt="You are Spark AI Agent.",
            files=self.fakes.files,
            sections=self.fakes.sections,
            families=self.fakes.families,
            settings_store=self.fakes.settings,
            transcriber=self.transcriber,
            provenance=self.fakes.provenance,
            auth=self.fakes.auth,
            moderator=self.moderator,
            safety=self.fakes.safety,
            live=self.voice,
            speaker=self.voice,
            titles=False,  # a title call would take a scripted step
        )
        self.harness = Harness(
            components.agent,
            components.handler,
            components.scheduler,
            components.budget,
            components.deps,
            configured,
            self.fakes,
            self.provider,
        )
        self.family_id = ""

    async def start(self) -> World:
        families = self.harness.agent.families
        made = await families.create(MUM, "The Smiths")
        self.family_id = made.id
        for user, role in ((DAD, "parent"), (KID, "dependent")):
            invite = await families.invite("mum", made.id, role)  # type: ignore[arg-type]
            await families.join(user, invite.token)
        return self

    def api(self) -> ApiApp:
        verifier = StaticTokenVerifier({f"{k}-token": v for k, v in USERS.items()})
        return ApiApp(self.harness.agent, verifier, self.harness.settings)

    def url(self, member: str = "kid", family_id: str | None = None) -> str:
        return f"{FAMILIES}/{family_id or self.family_id}/members/{member}/controls"

    async def set(self, client: httpx.AsyncClient, **body: Any) -> httpx.Response:
        body.setdefault("consent", ALL)
        return await client.put(self.url(), headers=auth("mum"), json=body)

    def calls(self) -> int:
        """Every call made to any processor."""
        return (
            len(self.provider.requests)
            + len(self.moderator.calls)
            + len(self.voice.spoken)
            + len(self.voice.minted)
            + len(self.transcriber.clips)
        )


def refused(response: httpx.Response, reason: str) -> None:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert (error["code"], error["reason"]) == ("parent_controls", reason)


# --- the route -------------------------------------------------------------------------


async def test_a_parent_sets_controls_and_the_dependent_reads_them_in_their_mirror() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        body = {
            "consent": {**ALL, "speech": False},
            "quietHours": {"start": "20:00", "end": "07:00", "timeZone": "Europe/London"},
            "dailyTurns": 30,
        }
        answer = await client.put(world.url(), headers=auth("dad"), json=body)
    assert answer.status_code == 200, answer.text
    controls = answer.json()["controls"]
    assert controls["consent"] == {**ALL, "speech": False}
    assert controls["quietHours"] == body["quietHours"] and controls["dailyTurns"] == 30
    mirror = world.fakes.families.documents[controls_mirror_path("kid")]
    assert mirror["consent"]["speech"] is False and mirror["dailyTurns"] == 30
    assert mirror["quietHours"]["timeZone"] == "Europe/London"
    assert controls_mirror_path("mum") not in world.fakes.families.documents


@pytest.mark.parametrize(
    ("caller", "member", "family"),
    [
        ("kid", "kid", None),  # a dependent: not a parent
        ("eve", "kid", None),  # a stranger
        ("mum", "dad", None),  # a parent is no one's dependent
        ("mum", "mum", None),
        ("mum", "eve", None),  # not a member
        ("mum", "kid", "fam_unknown"),
        ("mum", "kid", "..."),
    ],
)
async def test_controls_are_404_for_anyone_but_a_parent_of_a_dependent(
    caller: str, member: str, family: str | None
) -> None:
    world = await World().start()
    before = copy.deepcopy(world.fakes.families.documents)
    async with serving(world.api()) as client:
        answer = await client.put(
            world.url(member, family), headers=auth(caller), json={"consent": ALL}
        )
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["code"] == "family_not_found"
    assert world.fakes.families.documents == before


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"consent": {"chat": True}},
        {"consent": {**ALL, "chat": "yes"}},
        {"consent": {**ALL, "camera": True}},
        {"consent": ALL, "dailyTurns": 0},
        {"consent": ALL, "dailyTurns": 501},
        {"consent": ALL, "dailyTurns": 2.5},
        {"consent": ALL, "quietHours": {"start": "25:00", "end": "07:00", "timeZone": "UTC"}},
        {"consent": ALL, "quietHours": {"start": "7:00", "end": "07:00", "timeZone": "UTC"}},
        {"consent": ALL, "quietHours": {"start": "20:00", "end": "07:00", "timeZone": "Mars/Base"}},
        {"consent": ALL, "quietHours": {"start": "20:00", "end": "07:00", "timeZone": "../etc"}},
        {"consent": ALL, "quietHours": {"start": "20:00", "end": "07:00"}},
        {"consent": ALL, "extra": 1},
    ],
)
async def test_a_bad_body_is_400_and_changes_nothing(body: dict[str, Any]) -> None:
    world = await World().start()
    before = copy.deepcopy(world.fakes.families.documents)
    async with serving(world.api()) as client:
        answer = await client.put(world.url(), headers=auth("mum"), json=body)
    assert answer.status_code == 400, answer.text
    assert world.fakes.families.documents == before


async def test_a_dependent_made_a_parent_or_removed_loses_their_controls() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        assert (await world.set(client, dailyTurns=3)).status_code == 200
    assert controls_mirror_path("kid") in world.fakes.families.documents
    await world.harness.agent.families.set_role("mum", world.family_id, "kid", "parent")
    assert controls_mirror_path("kid") not in world.fakes.families.documents
    family = await world.harness.agent.families.current("kid")
    assert family.controls == {}


async def test_the_audit_finds_controls_of_anyone_but_a_dependent() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        assert (await world.set(client, dailyTurns=3)).status_code == 200
    stored = world.fakes.families.documents[family_path(world.family_id)]
    mirrors = {uid: world.fakes.families.documents.get(mirror_path(uid)) for uid in USERS}
    assert family_violations(stored, mirrors) == []
    wrong = copy.deepcopy(stored)
    wrong["controls"]["mum"] = wrong["controls"]["kid"]
    assert family_violations(wrong, mirrors) == [
        f"family {world.family_id}: controls for mum, who is not a dependent of it"
    ]


async def test_erasing_the_dependent_removes_their_controls() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        assert (await world.set(client, dailyTurns=3)).status_code == 200
        erased = await client.request(
            "DELETE",
            f"{FAMILIES}/{world.family_id}/members/kid/account",
            headers=auth("mum"),
            json={"confirm": "delete my account"},
        )
    assert erased.status_code == 202, erased.text
    handler = world.harness.handler()
    for _ in range(50):  # the erasure's task, in pages, until it is done
        tasks = world.fakes.queue.take()
        if not tasks:
            break
        for task in tasks:
            await handler.handle(TASK_PAYLOAD.validate_json(task.body))
    family = await world.harness.agent.families.current("mum")
    assert family.member("kid") is None and family.controls == {}
    assert controls_mirror_path("kid") not in world.fakes.families.documents


# --- refusals at the wire --------------------------------------------------------------


async def test_a_streamed_send_without_chat_consent_is_403_and_asks_no_one() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        assert (await world.set(client, consent={**ALL, "chat": False})).status_code == 200
        writes = copy.deepcopy(world.fakes.store.writes)
        sent = await client.post(
            MESSAGES, headers=streamed("kid"), json={"text": "What is seven times eight?"}
        )
    refused(sent, "consent")
    assert world.calls() == 0
    assert world.fakes.store.writes == writes  # nothing admitted


async def test_without_moderation_consent_a_dependents_chat_is_refused_too() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        assert (await world.set(client, consent={**ALL, "moderation": False})).status_code == 200
        sent = await client.post(MESSAGES, headers=streamed("kid"), json={"text": "Hello"})
    refused(sent, "consent")
    assert world.calls() == 0


async def test_moderation_off_needs_no_moderation_consent() -> None:
    world = await World([Step.reply("56")], moderation="off").start()
    async with serving(world.api()) as client:
        assert (await world.set(client, consent={**ALL, "moderation": False})).status_code == 200
    run = await world.harness.start(KID, "Hello")
    await run.execute(lambda frame: None)
    assert len(world.provider.requests) == 1 and world.moderator.calls == []


async def test_a_background_send_without_chat_consent_is_403_and_queues_nothing() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        assert (await world.set(client, consent={**ALL, "chat": False})).status_code == 200
        sent = await client.post(MESSAGES, headers=auth("kid"), json={"text": "Hello"})
    refused(sent, "consent")
    assert world.fakes.queue.take() == [] and world.calls() == 0


async def test_consent_withdrawn_after_a_send_was_queued_holds_at_the_egress() -> None:
    """The task's process reads the controls afresh: the queued reply asks no model, and
    its run does not stay queued."""
    world = await World().start()
    sent = await world.harness.agent.send(KID, "Hello", None, background=True)
    (reply,) = [t for t in world.fakes.queue.take() if t.name.startswith("reply-")]
    async with serving(world.api()) as client:
        assert (await world.set(client, consent={**ALL, "chat": False})).status_code == 200
    await world.harness.handler().handle(TASK_PAYLOAD.validate_json(reply.body))
    assert world.calls() == 0
    stored = await world.harness.store.get("kid", sent.conversation_id)
    assert stored is not None and stored.active_run is None
    assert stored.messages[-1].role == "assistant"
    assert stored.messages[-1].error is not None
    assert stored.messages[-1].error.code == "parent_controls"


async def test_a_task_tools_model_call_without_chat_consent_is_refused() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        assert (await world.set(client, consent={**ALL, "chat": False})).status_code == 200
    request = ModelRequest(system="Draft a lesson.", messages=[ChatMessage("user", "Fractions")])
    with pytest.raises(ParentControls) as caught:
        await world.harness.deps.model.complete("kid", request, "The lesson")
    assert caught.value.reason == "consent" and world.calls() == 0
    # A parent's own call is not controlled.
    world.provider.steps.append(Step.reply("A lesson"))
    assert await world.harness.deps.model.complete("mum", request, "The lesson") == "A lesson"


async def test_speech_without_consent_is_refused_and_nothing_is_spoken() -> None:
    world = await World([Step.reply("Seven eights are fifty-six.")]).start()
    run = await world.harness.start(KID, "What is seven times eight?")
    await run.execute(lambda frame: None)
    stored = await world.harness.store.get("kid", run.conversation_id)
    assert stored is not None
    reply_id = stored.messages[-1].id
    before = world.calls()
    async with serving(world.api()) as client:
        assert (await world.set(client, consent={**ALL, "speech": False})).status_code == 200
        spoken = await client.post(
            f"/api/spark/agent/conversations/{run.conversation_id}/speech",
            headers=auth("kid"),
            json={"messageId": reply_id},
        )
    refused(spoken, "consent")
    assert world.voice.spoken == [] and world.calls() == before


async def test_transcription_without_consent_is_refused_and_nothing_is_heard() -> None:
    world = await World().start()
    async with serving(world.api()) as client:
        assert (await world.set(client, consent={**ALL, "transcription": False})).status_code == 200
        session = await client.post("/api/spark/agent/voice/sessions", headers=auth("kid"))
    refused(session, "consent")
    clip = Clip(b"RIFF....", "audio/wav", "clip.wav", 1.0)
    with pytest.raises(ParentControls):
        async for _ in world.harness.deps.model.transcribe("kid", clip):
            pass
    assert world.transcriber.clips == [] and world.voice.minted == [] and world.calls() == 0


async def test_a_send_in_quiet_hours_is_refused_and_asks_no_one() -> None:
    world = await World([Step.reply("56")]).start()
    quiet = {"start": "11:30", "end": "13:00", "timeZone": "UTC"}
    async with serving(world.api()) as client:
        assert (await world.set(client, quietHours=quiet)).status_code == 200
        sent = await client.post(MESSAGES, headers=streamed("kid"), json={"text": "Hello"})
        refused(sent, "quiet_hours")
        assert world.calls() == 0
        await world.clock.advance(3600)  # 13:00: over
        again = await client.post(MESSAGES, headers=streamed("kid"), json={"text": "Hello"})
    assert again.status_code == 200, again.text
    assert len(world.provider.requests) == 1


async def test_a_regenerate_is_a_turn_the_controls_judge_as_a_send() -> None:
    world = await World([Step.reply("One")]).start()
    async with serving(world.api()) as client:
        assert (await world.set(client, dailyTurns=1)).status_code == 200
        run = await world.harness.start(KID, "Hello")  # the day's one turn
        await run.execute(lambda frame: None)
        stored = await world.fakes.store.get("kid", run.conversation_id)
        assert stored is not None and stored.messages[-1].role == "assistant"
        asked = world.calls()
        again = await client.post(
            f"/api/spark/agent/conversations/{run.conversation_id}/regenerate",
            headers=streamed("kid"),
            json={"messageId": stored.messages[-1].id},
        )
    refused(again, "daily_limit")
    assert world.calls() == asked
    assert await world.fakes.store.get("kid", run.conversation_id) == stored


async def test_past_the_daily_limit_a_send_is_refused_until_the_next_day() -> None:
    world = await World([Step.reply("One"), Step.reply("Two"), Step.reply("Three")]).start()
    async with serving(world.api()) as client:
        assert (await world.set(client, dailyTurns=2)).status_code == 200
        for _ in range(2):
            ok = await client.post(MESSAGES, headers=streamed("kid"), json={"text": "Hello"})
            assert ok.status_code == 200, ok.text
        asked = world.calls()
        third = await client.post(MESSAGES, headers=streamed("kid"), json={"text": "Hello"})
        refused(third, "daily_limit")
        assert world.calls() == asked
        await world.clock.advance(13 * 3600)  # 01:00 the next day (UTC)
        tomorrow = await client.post(MESSAGES, headers=streamed("kid"), json={"text": "Hello"})
    assert tomorrow.status_code == 200, tomorrow.text


async def test_two_processes_cannot_both_admit_the_last_turn_of_the_day() -> None:
    one = await World().start()
    two = World(fakes=one.fakes)  # another process on the same store
    async with serving(one.api()) as client:
        assert (await one.set(client, dailyTurns=1)).status_code == 200
    results = await asyncio.gather(
        one.harness.agent.send(KID, "Hello", None, background=True),
        two.harness.agent.send(KID, "Hello", None, background=True),
        return_exceptions=True,
    )
    kinds = sorted(type(r).__name__ for r in results)
    assert kinds == ["ParentControls", "Sent"], results
    (refusal,) = [r for r in results if isinstance(r, ParentControls)]
    assert refusal.reason == "daily_limit"
    replies = [t for t in one.fakes.queue.take() if t.name.startswith("reply-")]
    assert len(replies) == 1


# --- the opening line ------------------------------------------------------------------


async def test_a_dependents_conversation_opens_with_the_notice_the_model_never_sees() -> None:
    world = await World([Step.reply("56"), Step.reply("Hi")]).start()
    run = await world.harness.start(KID, "What is seven times eight?")
    await run.execute(lambda frame: None)
    stored = await world.harness.store.get("kid", run.conversation_id)
    assert stored is not None
    notice = stored.messages[0]
    assert notice.role == "system" and "an AI" in notice.text and "Spark AI Agent" in notice.text
    assert "not your words" in notice.text
    assert [m.role for m in stored.messages[1:]] == ["user", "assistant"]
    (request,) = world.provider.requests
    assert all("an AI, not a person" not in m.text for m in request.messages)
    assert "an AI, not a person" not in request.system
    # An adult's conversation has no notice.
    adult = await world.harness.start(MUM, "Hello")
    await adult.execute(lambda frame: None)
    theirs = await world.harness.store.get("mum", adult.conversation_id)
    assert theirs is not None and theirs.messages[0].role == "user"


# --- the rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "at", "quiet"),
    [
        ("20:00", "07:00", "21:00", True),
        ("20:00", "07:00", "06:59", True),
        ("20:00", "07:00", "07:00", False),
        ("20:00", "07:00", "12:00", False),
        ("09:00", "15:00", "09:00", True),
        ("09:00", "15:00", "15:00", False),
        ("09:00", "09:00", "09:00", False),
    ],
)
def test_quiet_hours_may_cross_midnight(start: str, end: str, at: str, quiet: bool) -> None:
    hours, minutes = at.split(":")
    now = datetime(2026, 6, 1, int(hours), int(minutes), tzinfo=UTC)
    window = QuietHours(start=start, end=end, time_zone="UTC")
    assert quiet_now(window, now) is quiet


def test_quiet_hours_are_judged_in_their_time_zone() -> None:
    # 19:30 UTC in June is 20:30 in London (BST).
    window = QuietHours(start="20:00", end="07:00", time_zone="Europe/London")
    assert quiet_now(window, datetime(2026, 6, 1, 19, 30, tzinfo=UTC))
    assert not quiet_now(window, datetime(2026, 12, 1, 19, 30, tzinfo=UTC))
