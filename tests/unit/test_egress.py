"""The promises kept where data leaves (DESIGN §13), each through a door other than the
one where it was first written: the opt-out once a quote has left the model's window,
after roll-over, inside a task's arguments and in provider state; speech metered
whatever the listener does. Each test looks at what reached the provider's side."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from shared.budget.allowance import UserLimits, admit_run, reserve, settle, spend
from shared.budget.service import RESERVATION_LEASE
from shared.clock import ManualClock
from shared.families.messages import Target
from shared.llm.base import (
    ChatMessage,
    Finish,
    ModelRequest,
    ProviderState,
    TextDelta,
    ToolCallRequest,
)
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.server import Reservation, TaskLedger
from shared.store.archive import roll_over_stored
from shared.voice.scripted import ScriptedVoice
from tests.unit.helpers import Fakes, Harness, egress_of, run_frames
from tests.unit.test_admission import deliver
from tests.unit.test_family_tools import DAD, KID, MUM, SECRET, calls, everything, household
from tests.unit.test_lesson_tools import DRAFT
from tests.unit.test_voice import harness as voice_harness

QUOTED = f"Kid wrote exactly this: {SECRET}"
# Four words in a row of the secret, and its number: what a model quotes of it.
PIECE = "diary code is 4321"


def said_anywhere(requests: list[ModelRequest], text: str) -> bool:
    return any(text in everything(r) for r in requests)


async def read_then_quote(harness: Harness) -> str:
    """Mum's agent reads Kid's secret, then quotes it in a later reply; a third turn
    follows, so the read is out of a four-message window while the quote is in it."""
    await harness.agent.delivery.deliver("kid", SECRET, Target(user_id="mum"))
    conversation_id, _ = await run_frames(harness, MUM, "what did my family say?")
    await run_frames(harness, MUM, "what exactly did Kid say?", conversation_id)
    await run_frames(harness, MUM, "all right", conversation_id)
    return conversation_id


def quoting_steps(*after: Step) -> list[Step]:
    return [
        calls(("read_family_messages", {})),
        Step.reply("Kid shared a code with you."),
        Step.reply(QUOTED),
        Step.reply("Good."),
        *after,
    ]


async def test_a_quote_is_withheld_after_the_read_has_left_the_window() -> None:
    provider = ScriptedProvider(quoting_steps(Step.reply("You're welcome.")))
    harness = await household(provider, history_messages=4)
    conversation_id = await read_then_quote(harness)
    await harness.agent.preferences.update("kid", ai_reads_family_messages=False)
    before = len(provider.requests)
    await run_frames(harness, MUM, "thanks", conversation_id)
    (request,) = provider.requests[before:]
    assert "read_family_messages" not in everything(request)  # the read is out of the window
    assert SECRET not in everything(request) and PIECE not in everything(request)
    assert "4321" not in everything(request)


async def test_a_piece_of_a_withheld_message_is_withheld_too() -> None:
    provider = ScriptedProvider(
        [
            calls(("read_family_messages", {})),
            Step.reply(f"Kid said the {PIECE}, and asked you to keep it quiet."),
            Step.reply("All right."),
        ]
    )
    harness = await household(provider)
    await harness.agent.delivery.deliver("kid", SECRET, Target(user_id="mum"))
    conversation_id, _ = await run_frames(harness, MUM, "what did my family say?")
    await harness.agent.preferences.update("kid", ai_reads_family_messages=False)
    await run_frames(harness, MUM, "thanks", conversation_id)
    said = everything(provider.requests[-1])
    assert PIECE not in said and "4321" not in said
    assert "keep it quiet" in said  # the agent's own words stay


async def test_speech_after_roll_over_withholds_a_quote_of_an_archived_read() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock)
    provider = ScriptedProvider(quoting_steps())
    harness = voice_harness(provider, clock, voice)
    families = harness.agent.families
    family = await families.create(MUM, "The Smiths")
    for user, role in ((DAD, "parent"), (KID, "dependent")):
        made = await families.invite("mum", family.id, role)  # type: ignore[arg-type]
        await families.join(user, made.token)
    conversation_id = await read_then_quote(harness)
    # Everything but the last four messages goes to the archive, the read with it.
    await roll_over_stored(harness.store, "mum", conversation_id, 1, 4, clock.now())
    stored = await harness.store.get("mum", conversation_id)
    assert stored is not None
    assert "read_family_messages" not in stored.model_dump_json()
    (quote,) = [m for m in stored.messages if SECRET in m.text]

    await harness.agent.preferences.update("kid", ai_reads_family_messages=False)
    spoken = await harness.agent.speak("mum", conversation_id, quote.id)
    assert [c async for c in spoken.chunks]
    (said,) = voice.spoken
    assert SECRET not in said and "4321" not in said and "[withheld]" in said


async def test_a_task_queued_before_the_opt_out_sends_no_withheld_words() -> None:
    brief = {"topic": f"Keeping secrets: {SECRET}", "audience": "Year 5"}
    provider = ScriptedProvider(
        [
            calls(("read_family_messages", {})),
            Step([ToolCallRequest("c1", "create_lesson", json.dumps(brief)), Finish("tool_calls")]),
            Step.reply("I am writing that lesson."),
            Step([TextDelta(DRAFT), Finish("stop")]),  # the drafter's own call
            Step.reply("The lesson is ready."),
        ]
    )
    fakes = Fakes()
    harness = await household(provider, fakes)
    await harness.agent.delivery.deliver("kid", SECRET, Target(user_id="mum"))
    await run_frames(harness, MUM, "make a lesson from what Kid said")
    assert SECRET in everything(provider.requests[1])  # given before the opt-out
    await harness.agent.preferences.update("kid", ai_reads_family_messages=False)
    before = len(provider.requests)
    await deliver(harness)
    later = provider.requests[before:]
    assert any("writing a lesson" in r.system for r in later)  # the drafter's own call
    assert not said_anywhere(later, SECRET) and not said_anywhere(later, "4321")


async def test_provider_state_made_from_withheld_words_is_not_sent_back() -> None:
    state = ProviderState("scripted", json.dumps({"reasoning": "opaque, about the code"}))
    provider = ScriptedProvider(
        [
            calls(("read_family_messages", {})),
            Step([TextDelta("Kid shared a code."), Finish("stop", state=state)]),
            Step.reply("Noted."),
            Step.reply("Noted again."),
        ]
    )
    harness = await household(provider)
    await harness.agent.delivery.deliver("kid", SECRET, Target(user_id="mum"))
    conversation_id, _ = await run_frames(harness, MUM, "what did my family say?")
    await run_frames(harness, MUM, "ok", conversation_id)
    assert any(t.state == state for t in provider.requests[-1].messages)  # sent back before
    await harness.agent.preferences.update("kid", ai_reads_family_messages=False)
    await run_frames(harness, MUM, "ok again", conversation_id)
    assert all(t.state is None for t in provider.requests[-1].messages)


async def test_speech_is_charged_when_the_listener_leaves_after_the_first_chunk() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock, chunks=5)
    reply = "A reply of some length, read aloud. " * 10
    harness = voice_harness(ScriptedProvider([Step.reply(reply)]), clock, voice)
    conversation_id, _ = await run_frames(harness, MUM, "hello")
    stored = await harness.store.get("mum", conversation_id)
    assert stored is not None
    message_id = stored.messages[-1].id
    before = await harness.fakes.ledger.get("mum")
    spent_before = before.usage.tokens if before.usage else 0
    for _ in range(30):
        spoken = await harness.agent.speak("mum", conversation_id, message_id)
        assert await anext(aiter(spoken.chunks))
        await spoken.chunks.aclose()  # type: ignore[attr-defined]
    assert len(voice.spoken) == 30
    after = await harness.fakes.ledger.get("mum")
    assert after.usage is not None
    per_reading = len(reply.strip()) // 4
    assert after.usage.tokens - spent_before >= 30 * per_reading


async def test_speech_left_unsettled_is_charged_whole_when_its_lease_ends() -> None:
    clock = ManualClock()
    voice = ScriptedVoice(clock, chunks=5)
    reply = "Another reply, long enough to be worth counting. " * 4
    harness = voice_harness(ScriptedProvider([Step.reply(reply)]), clock, voice)
    conversation_id, _ = await run_frames(harness, MUM, "hello")
    stored = await harness.store.get("mum", conversation_id)
    assert stored is not None
    spoken = await harness.agent.speak("mum", conversation_id, stored.messages[-1].id)
    assert await anext(aiter(spoken.chunks))
    # The process dies here: the stream is never closed, nothing is settled.
    before = (await harness.fakes.ledger.get("mum")).usage
    await clock.advance(3600)
    await harness.budget.settle("mum", "unrelated", 0)  # any later write of the ledger
    after = (await harness.fakes.ledger.get("mum")).usage
    assert after is not None
    assert after.tokens - (before.tokens if before else 0) >= len(reply.strip()) // 4


def test_a_dead_runs_step_in_flight_is_charged_its_reservation_and_its_slot_nothing() -> None:
    limits = UserLimits(runs_at_once=2, daily_tokens=100_000)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ledger, _ = admit_run(TaskLedger(), "run_dead", "c1", now, limits)
    ledger = spend(ledger, now, 300)  # its first step, settled as it ended
    step = Reservation(tokens=5_000, until=now + RESERVATION_LEASE, kind="chat")
    ledger = reserve(ledger, "step_2", step, now, limits)
    # Its process died in its second step: nothing settled it, nothing released it.
    later = now + max(limits.slot, RESERVATION_LEASE) + timedelta(seconds=1)
    ledger, _ = admit_run(ledger, "run_next", "c2", later, limits)
    assert list(ledger.runs) == ["c2"]
    ledger = settle(ledger, "unrelated", 0, later)  # any later change of the ledger
    assert ledger.usage is not None and ledger.usage.tokens == 300 + 5_000
    assert not ledger.reservations


async def test_a_screening_read_ahead_serves_one_request_of_its_own_user() -> None:
    """The screen's read begun ahead (a head start's, ``Egress.screening``) is fresh for
    the one request it was begun for: not another user's, not a second one."""
    provider = ScriptedProvider([Step.reply("Hello.")])
    egress = egress_of(provider)
    request = ModelRequest(system="", messages=[ChatMessage(role="user", text="hi")], tools=[])
    screening = egress.screening("mum")
    with pytest.raises(ValueError, match="one request of its own user"):
        await egress.chat("dad", request, screening)
    reply = [e async for e in await egress.chat("mum", request, screening)]
    assert isinstance(reply[0], TextDelta) and reply[0].text == "Hello."
    with pytest.raises(ValueError, match="one request of its own user"):
        await egress.chat("mum", request, screening)
    assert len(provider.requests) == 1
    await screening.close()
