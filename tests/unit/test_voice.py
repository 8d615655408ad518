"""Voice (issue 23): live-audio sessions minted within each user's allowance and bound
to them, voice messages redeeming their session once, and spoken replies cached per
message, through the real api app on fakes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import timedelta

import httpx
import pytest

from shared.budget import voice_grants
from shared.clock import ManualClock
from shared.config import Settings
from shared.errors import RateLimited
from shared.ids import SequentialIds
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import (
    ContentPart,
    Conversation,
    Message,
    ToolCall,
    ToolResult,
)
from shared.schemas.server import TaskLedger
from shared.voice.live import secret_hash
from shared.voice.scripted import ScriptedVoice
from shared.voice.speech import pieces, spoken_text
from shared.wiring import assemble
from tests.unit.helpers import ALICE as ALICE_USER
from tests.unit.helpers import Fakes, Harness, api_of, serving

ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}
SESSIONS = "/api/spark/agent/voice/sessions"
MESSAGES = "/api/spark/agent/messages"


def harness(
    provider: ScriptedProvider,
    clock: ManualClock,
    voice: ScriptedVoice | None,
    fakes: Fakes | None = None,
    **settings: int,
) -> Harness:
    fakes = fakes or Fakes()
    configured = replace(Settings(), **settings)
    components = assemble(
        configured,
        fakes.store,
        fakes.ledger,
        fakes.lessons,
        fakes.queue,
        provider,
        clock,
        ids=SequentialIds(),
        system_prompt="You are Spark AI Agent.",
        files=fakes.files,
        sections=fakes.sections,
        live=voice,
        speaker=voice,
        titles=False,  # (no title calls: the model is scripted)
    )
    return Harness(
        components.agent,
        components.handler,
        components.scheduler,
        components.budget,
        components.deps,
        configured,
        fakes,
        provider,
    )


async def ledger_of(h: Harness, uid: str = "alice") -> TaskLedger:
    return await h.fakes.ledger.get(uid)


# -- live-audio sessions ------------------------------------------------------------------


async def test_voice_session_mints_a_secret_bound_to_the_user_and_keeps_only_its_hash() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock)
    h = harness(ScriptedProvider([]), clock, voice)
    async with serving(api_of(h)) as client:
        answer = await client.post(SESSIONS, headers=ALICE)
    assert answer.status_code == 201, answer.text
    assert answer.headers["cache-control"] == "no-store"
    body = answer.json()
    assert body["secret"] == "secret-1"
    assert body["provider"] == "openai" and body["model"] == "scripted-transcribe"
    assert body["expiresAt"].startswith("2026-01-01T00:01:00")  # SPARK_VOICE_SECRET_SECONDS
    assert body["endsAt"].startswith("2026-01-01T00:30:00")  # SPARK_VOICE_SESSION_MINUTES
    assert voice.minted == [(timedelta(seconds=60), timedelta(minutes=30))]
    grant = (await ledger_of(h)).voice[body["sessionId"]]
    assert grant.secret_hash == secret_hash("secret-1")
    stored = json.dumps((await ledger_of(h)).to_firestore(), default=str)
    assert "secret-1" not in stored  # only its hash
    assert (await ledger_of(h, "bob")).voice == {}


async def test_voice_sessions_past_the_allowance_are_429_and_mint_nothing() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock)
    h = harness(ScriptedProvider([]), clock, voice, voice_sessions_per_day=2)
    async with serving(api_of(h)) as client:
        for _ in range(2):
            assert (await client.post(SESSIONS, headers=ALICE)).status_code == 201
        refused = await client.post(SESSIONS, headers=ALICE)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limited"
        assert int(refused.headers["retry-after"]) > 0
        assert len(voice.minted) == 2  # the provider was not asked a third time
        # Another user has their own allowance; a new day gives Alice hers again.
        assert (await client.post(SESSIONS, headers=BOB)).status_code == 201
        await clock.advance(24 * 3600)
        assert (await client.post(SESSIONS, headers=ALICE)).status_code == 201


async def test_two_processes_cannot_both_grant_the_last_voice_session() -> None:
    clock = ManualClock()
    fakes = Fakes()
    one = harness(
        ScriptedProvider([]), clock, ScriptedVoice(clock), fakes, voice_sessions_per_day=1
    )
    two = harness(
        ScriptedProvider([]), clock, ScriptedVoice(clock), fakes, voice_sessions_per_day=1
    )
    results = await asyncio.gather(
        one.agent.start_voice_session("alice"),
        two.agent.start_voice_session("alice"),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["RateLimited", "VoiceSession"]
    ledger = await ledger_of(one)
    assert ledger.usage is not None and ledger.usage.voice_sessions == 1
    assert len(ledger.voice) == 1


async def test_voice_session_offline_is_a_clear_409_and_writes_nothing() -> None:
    clock = ManualClock()
    h = harness(ScriptedProvider([]), clock, None)
    async with serving(api_of(h)) as client:
        refused = await client.post(SESSIONS, headers=ALICE)
        speech = await client.post(
            "/api/spark/agent/conversations/conv_1/speech", headers=ALICE, json={"messageId": "m"}
        )
    for answer in (refused, speech):
        assert answer.status_code == 409
        error = answer.json()["error"]
        assert error["code"] == "voice_unavailable"
        assert "needs an audio provider" in error["message"]
    assert await ledger_of(h) == TaskLedger()
    assert h.fakes.files.paths() == []


async def test_voice_session_the_provider_failing_gives_the_days_session_back() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock, fail=True)
    h = harness(ScriptedProvider([]), clock, voice, voice_sessions_per_day=1)
    async with serving(api_of(h)) as client:
        failed = await client.post(SESSIONS, headers=ALICE)
        assert failed.status_code == 503
        voice.fail = False
        assert (await client.post(SESSIONS, headers=ALICE)).status_code == 201


async def test_voice_session_needs_a_signed_in_user() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock)
    h = harness(ScriptedProvider([]), clock, voice)
    async with serving(api_of(h)) as client:
        assert (await client.post(SESSIONS)).status_code == 401
        assert (await client.get(SESSIONS, headers=ALICE)).status_code == 405
    assert voice.minted == []


# -- voice messages -------------------------------------------------------------------------


async def start(client: httpx.AsyncClient, headers: dict[str, str] = ALICE) -> str:
    answer = await client.post(SESSIONS, headers=headers)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["sessionId"])


async def send_voice(
    client: httpx.AsyncClient,
    session: str,
    text: str,
    conversation_id: str | None = None,
    headers: dict[str, str] = ALICE,
) -> httpx.Response:
    body: dict[str, object] = {"text": text, "input": "voice", "voiceSessionId": session}
    if conversation_id is not None:
        # The first utterance's reply is still queued (202: no task runs here).
        body["conversationId"] = conversation_id
        body["whenBusy"] = "queue"
    return await client.post(MESSAGES, headers=headers, json=body)


async def test_a_voice_message_is_stored_as_voice_and_its_session_serves_its_conversation() -> None:
    clock = ManualClock()
    h = harness(ScriptedProvider([]), clock, ScriptedVoice(clock))
    async with serving(api_of(h)) as client:
        session = await start(client)
        first = await send_voice(client, session, "hello there")
        assert first.status_code == 202, first.text
        conversation_id = first.json()["conversationId"]
        ledger = await ledger_of(h)
        assert ledger.voice[session].conversation_id == conversation_id
        stored = await h.store.get("alice", conversation_id)
        assert stored is not None
        user_message = stored.messages[0]
        assert user_message.input == "voice" and user_message.text == "hello there"
        assert user_message.to_firestore()["input"] == "voice"
        # The next utterance of the same session goes into the same conversation.
        second = await send_voice(client, session, "and another thing", conversation_id)
        assert second.status_code == 202, second.text
        assert second.json()["status"] == "queued"
        typed = await client.post(
            MESSAGES,
            headers=ALICE,
            json={"text": "typed", "conversationId": conversation_id, "whenBusy": "queue"},
        )
        assert typed.status_code == 202
        stored = await h.store.get("alice", conversation_id)
        assert stored is not None and stored.queued_messages is not None
        assert [m.input for m in stored.queued_messages] == ["voice", None]


async def test_a_voice_session_is_refused_when_reused_and_nothing_is_written() -> None:
    clock = ManualClock()
    h = harness(ScriptedProvider([]), clock, ScriptedVoice(clock))
    async with serving(api_of(h)) as client:
        session = await start(client)
        first = await send_voice(client, session, "hello there")
        assert first.status_code == 202
        conversation_id = first.json()["conversationId"]
        documents = dict(h.store._documents)
        queued = list(h.fakes.queue.tasks)
        ledger = await ledger_of(h)
        # Reused for a new conversation: refused, nothing written.
        reused = await send_voice(client, session, "start another")
        assert reused.status_code == 409
        assert reused.json()["error"]["code"] == "voice_session_used"
        # Bob cannot name Alice's session at all.
        stolen = await send_voice(client, session, "mine now", headers=BOB)
        assert stolen.status_code == 404
        assert stolen.json()["error"]["code"] == "voice_session_not_found"
        # A session never minted, and a typed message naming one, are refused too.
        unknown = await send_voice(client, "vs_nope", "hello")
        assert unknown.status_code == 404
        mixed = await client.post(
            MESSAGES, headers=ALICE, json={"text": "typed", "voiceSessionId": session}
        )
        assert mixed.status_code == 400
        bare = await client.post(MESSAGES, headers=ALICE, json={"text": "x", "input": "voice"})
        assert bare.status_code == 400
        assert h.store._documents == documents
        assert list(h.fakes.queue.tasks) == queued
        assert await ledger_of(h) == ledger
        # Once the session ends, even its own conversation refuses it.
        await clock.advance(31 * 60)
        ended = await send_voice(client, session, "still there?", conversation_id)
        assert ended.status_code == 410
        assert ended.json()["error"]["code"] == "voice_session_ended"
        assert h.store._documents == documents


# -- the ledger's voice grants (pure) ------------------------------------------------------


def test_voice_grant_counts_and_is_refused_past_the_allowance() -> None:
    clock = ManualClock()
    now = clock.now()
    limits = voice_grants.VoiceLimits(sessions_per_day=1)
    granted = voice_grants.grant_voice(TaskLedger(), "vs_1", "openai", "m", now, limits)
    assert granted.usage is not None and granted.usage.voice_sessions == 1
    with pytest.raises(RateLimited):
        voice_grants.grant_voice(granted, "vs_2", "openai", "m", now, limits)
    # Withdrawn (never minted): the count is given back.
    withdrawn = voice_grants.withdraw_voice(granted, "vs_1", now)
    assert withdrawn.usage is not None and withdrawn.usage.voice_sessions == 0
    assert withdrawn.voice == {}
    # A minted grant is never withdrawn; old ones are dropped a day after they end.
    minted = voice_grants.record_voice(granted, "vs_1", "h", now + timedelta(minutes=1))
    assert voice_grants.withdraw_voice(minted, "vs_1", now) == minted
    later = now + timedelta(days=2)
    assert list(voice_grants.grant_voice(minted, "vs_3", "openai", "m", later, limits).voice) == [
        "vs_3"
    ]


# -- spoken replies ------------------------------------------------------------------------


def reply_with_a_lesson() -> Message:
    call = ToolCall(
        id="c1",
        name="get_document_info",
        args_json="{}",
        display_text="Looking at the lesson",
        execution="inline",
        status="complete",
    )
    result = ToolResult(tool_call_id="c1", output_json="{}", status="ok")
    return Message(
        id="msg_r",
        role="assistant",
        created_at=ManualClock().now(),
        status="complete",
        content=[
            ContentPart.of_text("Here is your lesson."),
            ContentPart(type="tool_call", tool_call=call),
            ContentPart(
                type="tool_result",
                tool_result=result,
                description="A lesson card: “Fractions”, covering: halves; quarters.",
            ),
            ContentPart.of_text("Shall we start?"),
        ],
    )


def test_spoken_text_reads_each_visual_part_by_its_description_in_its_place() -> None:
    assert spoken_text(reply_with_a_lesson()) == (
        "Here is your lesson.\n\nA lesson card: “Fractions”, covering: halves; quarters."
        "\n\nShall we start?"
    )


def test_pieces_cut_long_text_at_sentences_within_the_limit() -> None:
    text = "One sentence here. " * 40
    cut = pieces(text, 100)
    assert all(len(p) <= 100 for p in cut)
    assert " ".join(cut) == text.strip()
    assert all(p.endswith(".") for p in cut)


async def with_reply(h: Harness) -> str:
    """A conversation of Alice's whose last message is the agent's reply ``msg_r``."""
    provider_reply = reply_with_a_lesson()
    sent = await h.agent.send(ALICE_USER, "make a lesson", None)
    assert sent.run is not None
    await sent.run.execute(lambda frame: None)

    def add(conversation: Conversation) -> Conversation:
        return conversation.model_copy(
            update={"messages": [*conversation.messages, provider_reply]}
        )

    await h.store.mutate("alice", sent.conversation_id, add)
    return sent.conversation_id


async def test_speech_streams_the_reply_and_a_replay_costs_no_provider_call() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock)
    h = harness(ScriptedProvider([Step.reply("Sure.")]), clock, voice)
    conversation_id = await with_reply(h)
    url = f"/api/spark/agent/conversations/{conversation_id}/speech"
    async with serving(api_of(h)) as client:
        first = await client.post(url, headers=ALICE, json={"messageId": "msg_r"})
        assert first.status_code == 200, first.text
        assert first.headers["content-type"] == "audio/mpeg"
        assert first.headers["x-spark-speech"] == "made"
        assert len(voice.spoken) == 1
        assert voice.spoken[0].startswith("Here is your lesson.\n\nA lesson card: “Fractions”")
        tokens = (await ledger_of(h)).usage
        again = await client.post(url, headers=ALICE, json={"messageId": "msg_r"})
        assert again.status_code == 200
        assert again.headers["x-spark-speech"] == "cached"
        assert again.content == first.content
        assert len(voice.spoken) == 1  # no second provider call
        assert (await ledger_of(h)).usage == tokens  # and nothing more counted
    cached = [p for p in h.fakes.files.paths() if "/speech/" in p]
    assert len(cached) == 1 and cached[0].startswith(f"alice/speech/{conversation_id}/msg_r-")


async def test_speech_is_for_the_owner_and_for_replies_only() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock)
    h = harness(ScriptedProvider([Step.reply("Sure.")]), clock, voice)
    conversation_id = await with_reply(h)
    stored = await h.store.get("alice", conversation_id)
    assert stored is not None
    user_message_id = stored.messages[0].id
    url = f"/api/spark/agent/conversations/{conversation_id}/speech"
    async with serving(api_of(h)) as client:
        stranger = await client.post(url, headers=BOB, json={"messageId": "msg_r"})
        assert stranger.status_code == 404
        missing = await client.post(url, headers=ALICE, json={"messageId": "msg_gone"})
        assert missing.status_code == 404
        users = await client.post(url, headers=ALICE, json={"messageId": user_message_id})
        assert users.status_code == 400
        assert "replies" in users.json()["error"]["message"]
        bad = await client.post(url, headers=ALICE, json={"messageId": "../x"})
        assert bad.status_code == 400
    assert voice.spoken == []
    assert [p for p in h.fakes.files.paths() if "/speech/" in p] == []


async def test_speech_is_refused_once_todays_tokens_are_spent() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock)
    h = harness(ScriptedProvider([Step.reply("Sure.")]), clock, voice, daily_tokens_per_user=1)
    conversation_id = await with_reply(h)
    await h.budget.spend("alice", 10)
    url = f"/api/spark/agent/conversations/{conversation_id}/speech"
    async with serving(api_of(h)) as client:
        refused = await client.post(url, headers=ALICE, json={"messageId": "msg_r"})
    assert refused.status_code == 429
    assert voice.spoken == []


async def test_speech_cached_after_its_conversation_was_deleted_is_not_kept() -> None:
    """No zombie writes (DESIGN §15): a reply being read aloud when its conversation is
    deleted keeps no audio once it is whole (Storage has no precondition on the
    conversation: the audio is removed once a fresh read finds the conversation gone)."""
    clock = ManualClock()
    h = harness(ScriptedProvider([Step.reply("Sure.")]), clock, ScriptedVoice(clock))
    conversation_id = await with_reply(h)
    spoken = await h.agent.speak("alice", conversation_id, "msg_r")
    await h.agent.delete_conversation("alice", conversation_id)
    heard = [chunk async for chunk in spoken.chunks]
    assert heard  # the listener still hears it to the end
    assert [p for p in h.fakes.files.paths() if "/speech/" in p] == []
