"""A covered user's turn judged beside the model's reply to it (DESIGN §16): the reply's
first token waits for the verdict, a flagged turn gets the fixed kind reply (the model's
words never reach the document), a failed verdict holds closed for a dependent and goes
on for an adult, and an adult's turn under ``dependents`` is not judged at all."""

from __future__ import annotations

import asyncio
import json

import pytest

from shared.agent.stream.events import ErrorEvent, TextEvent
from shared.agent.stream.transcript import UNJUDGED_IN_DOCUMENT, WITHHELD_IN_DOCUMENT, Frame
from shared.llm.moderation import ScriptedModerator, Verdict
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Message, Moderated
from tests.unit.helpers import Fakes, Harness, make_service, run_frames, serving, until
from tests.unit.test_family_tools import DAD, EVE, KID, MUM

FLAGGED = "I want to k1ll myself"
MODEL_WORDS = "The model's own answer"
# A flagged turn's model request may be cancelled before it leaves (a verdict quicker
# than the event loop's next turn) or after: its scripted step is used or not.
FLAGGED_TURN = pytest.mark.leaves_steps


def word_list(text: str) -> Verdict:
    """The moderator's rule in these tests: the offline stand-in's."""
    from shared.egress.offline_moderator import judged

    return judged(text)


async def family(
    provider: ScriptedProvider, moderator: ScriptedModerator, **settings: int | str
) -> Harness:
    """Mum and Dad (parents) and Kid (a dependent), moderated by ``moderator``."""
    harness = make_service(provider, fakes=Fakes(), moderator=moderator, **settings)
    families = harness.agent.families
    made = await families.create(MUM, "The Smiths")
    for user, role in ((DAD, "parent"), (KID, "dependent")):
        invite = await families.invite("mum", made.id, role)  # type: ignore[arg-type]
        await families.join(user, invite.token)
    return harness


async def reply_of(harness: Harness, user_id: str, conversation_id: str) -> Message:
    stored = await harness.store.get(user_id, conversation_id)
    assert stored is not None
    return stored.messages[-1]


@FLAGGED_TURN
async def test_a_dependents_flagged_turn_gets_the_kind_reply_not_the_models() -> None:
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(provider, ScriptedModerator(word_list))
    conversation_id, frames = await run_frames(harness, KID, FLAGGED)
    reply = await reply_of(harness, "kid", conversation_id)
    assert MODEL_WORDS not in reply.text
    assert "Childline on 0800 1111" in reply.text
    assert reply.status == "complete"
    assert reply.moderated == Moderated(direction="input", category="self_harm")
    said = "".join(f.event.content for f in frames if isinstance(f.event, TextEvent))
    assert MODEL_WORDS not in said and "Childline" in said


@FLAGGED_TURN
async def test_the_helpline_comes_from_the_settings() -> None:
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(
        provider, ScriptedModerator(word_list), helpline="Kids Help Phone, 1-800-668-6868"
    )
    conversation_id, _ = await run_frames(harness, KID, FLAGGED)
    reply = await reply_of(harness, "kid", conversation_id)
    assert "Kids Help Phone" in reply.text and "Childline" not in reply.text


@FLAGGED_TURN
async def test_another_category_gets_the_plain_kind_reply() -> None:
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(provider, ScriptedModerator(word_list))
    conversation_id, _ = await run_frames(harness, KID, "where can I buy w33d")
    reply = await reply_of(harness, "kid", conversation_id)
    assert MODEL_WORDS not in reply.text and "Childline" not in reply.text
    assert reply.moderated == Moderated(direction="input", category="illicit")


async def test_an_adults_turn_is_not_judged_under_dependents() -> None:
    moderator = ScriptedModerator(word_list)
    harness = await family(ScriptedProvider([Step.reply(MODEL_WORDS)]), moderator)
    conversation_id, _ = await run_frames(harness, MUM, FLAGGED)
    reply = await reply_of(harness, "mum", conversation_id)
    assert reply.text == MODEL_WORDS and reply.moderated is None
    assert moderator.calls == []


@FLAGGED_TURN
async def test_everyone_judges_an_adult_too() -> None:
    moderator = ScriptedModerator(word_list)
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(provider, moderator, moderation="everyone")
    conversation_id, _ = await run_frames(harness, MUM, FLAGGED)
    reply = await reply_of(harness, "mum", conversation_id)
    assert MODEL_WORDS not in reply.text and reply.moderated is not None


async def test_a_clean_turn_is_answered_by_the_model() -> None:
    moderator = ScriptedModerator(word_list)
    harness = await family(ScriptedProvider([Step.reply(MODEL_WORDS)]), moderator)
    conversation_id, _ = await run_frames(harness, KID, "What is seven times eight?")
    reply = await reply_of(harness, "kid", conversation_id)
    assert reply.text == MODEL_WORDS and reply.moderated is None
    assert moderator.calls == [("What is seven times eight?", 0), (MODEL_WORDS, 0)]


async def test_the_first_token_waits_for_the_verdict_while_the_request_is_out() -> None:
    moderator = ScriptedModerator(word_list, gate=asyncio.Event())
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(provider, moderator)
    run = await harness.start(KID, "What is seven times eight?")
    frames: list[Frame] = []
    running = asyncio.ensure_future(run.execute(frames.append))
    # The model was asked while the moderator had not answered: the two are concurrent.
    await until(lambda: bool(provider.requests) and bool(moderator.calls), "both asked")
    await until(lambda: not provider.steps, "the model's reply to be ready")
    assert not any(isinstance(f.event, TextEvent) for f in frames)
    assert moderator.gate is not None
    moderator.gate.set()
    await running
    assert any(isinstance(f.event, TextEvent) for f in frames)


async def test_a_hanging_moderator_holds_a_dependents_turn_closed() -> None:
    moderator = ScriptedModerator(word_list, gate=asyncio.Event())  # never answers
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(provider, moderator, moderation_seconds=1)
    conversation_id, frames = await run_frames(harness, KID, "What is seven times eight?")
    reply = await reply_of(harness, "kid", conversation_id)
    assert MODEL_WORDS not in reply.text
    assert reply.error is not None and reply.error.code == "moderation_unavailable"
    assert "try again" in reply.error.message
    assert isinstance(frames[-1].event, ErrorEvent)


async def test_a_failing_moderator_lets_an_adult_go_on() -> None:
    from shared.errors import ProviderUnavailable

    moderator = ScriptedModerator(word_list, failure=ProviderUnavailable("down"))
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(provider, moderator, moderation="everyone")
    conversation_id, _ = await run_frames(harness, MUM, "What is seven times eight?")
    assert (await reply_of(harness, "mum", conversation_id)).text == MODEL_WORDS


async def test_open_lets_a_dependent_go_on_when_the_moderator_fails() -> None:
    from shared.errors import ProviderUnavailable

    moderator = ScriptedModerator(word_list, failure=ProviderUnavailable("down"))
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(provider, moderator, moderation_fail="open")
    conversation_id, _ = await run_frames(harness, KID, "What is seven times eight?")
    assert (await reply_of(harness, "kid", conversation_id)).text == MODEL_WORDS


HALF_WAY = ["Here is a fact about owls. ", "Some people say ", "k1ll myself", ". More words."]


async def test_a_reply_flagged_half_way_is_withheld_and_leaves_a_note() -> None:
    moderator = ScriptedModerator(word_list)
    harness = await family(ScriptedProvider([Step.reply(*HALF_WAY)]), moderator)
    conversation_id, frames = await run_frames(harness, KID, "Tell me about owls")
    reply = await reply_of(harness, "kid", conversation_id)
    assert reply.status == "withheld"
    assert reply.text == WITHHELD_IN_DOCUMENT
    assert "owls" not in reply.text
    assert reply.moderated == Moderated(direction="output", category="self_harm")
    last = frames[-1].event
    assert isinstance(last, ErrorEvent) and last.code == "withheld"


async def test_a_reply_that_cannot_be_judged_half_way_leaves_no_unjudged_words() -> None:
    """Closed holds for the reply too: when a sentence's verdict fails, what had
    streamed of it was never judged, so the document keeps a note, not those words."""
    from shared.errors import ProviderUnavailable

    def rule(text: str) -> Verdict:
        if "owls" in text and "Tell me" not in text:  # the reply's, not the turn's
            raise ProviderUnavailable("down")
        return word_list(text)

    moderator = ScriptedModerator(rule)
    harness = await family(ScriptedProvider([Step.reply(*HALF_WAY)]), moderator)
    conversation_id, frames = await run_frames(harness, KID, "Tell me about them")
    reply = await reply_of(harness, "kid", conversation_id)
    assert reply.error is not None and reply.error.code == "moderation_unavailable"
    assert "owls" not in reply.text and reply.text == UNJUDGED_IN_DOCUMENT
    last = frames[-1].event
    assert isinstance(last, ErrorEvent) and last.code == "moderation_unavailable"


async def test_an_adults_reply_is_not_judged_under_dependents() -> None:
    moderator = ScriptedModerator(word_list)
    harness = await family(ScriptedProvider([Step.reply(*HALF_WAY)]), moderator)
    conversation_id, _ = await run_frames(harness, MUM, "Tell me about owls")
    reply = await reply_of(harness, "mum", conversation_id)
    assert reply.status == "complete" and reply.text == "".join(HALF_WAY)
    assert moderator.calls == []


async def test_a_clean_reply_is_judged_sentence_by_sentence_and_completes() -> None:
    moderator = ScriptedModerator(word_list)
    steps = [Step.reply("Owls hunt at night. ", "They have ", "soft feathers. ", "The end")]
    harness = await family(ScriptedProvider(steps), moderator)
    conversation_id, _ = await run_frames(harness, KID, "Tell me about owls")
    reply = await reply_of(harness, "kid", conversation_id)
    assert reply.status == "complete" and reply.moderated is None
    judged_texts = [text for text, _ in moderator.calls]
    assert judged_texts == [
        "Tell me about owls",
        "Owls hunt at night. ",
        "They have soft feathers. ",
        "The end",
    ]


@FLAGGED_TURN
async def test_every_flag_reaches_the_parents_and_no_one_else() -> None:
    from functions.spark_http.app import ApiApp
    from shared.auth.base import StaticTokenVerifier

    provider = ScriptedProvider([Step.reply(*HALF_WAY), Step.reply(MODEL_WORDS)])
    harness = await family(provider, ScriptedModerator(word_list))
    withheld, _ = await run_frames(harness, KID, "Tell me about owls")
    turned, _ = await run_frames(harness, KID, FLAGGED)
    for parent in ("mum", "dad"):
        mirror = await harness.fakes.safety.get(parent)
        flags = [(f.member_id, f.category, f.direction, f.conversation_id) for f in mirror.flags]
        assert flags == [  # newest first
            ("kid", "self_harm", "input", turned),
            ("kid", "self_harm", "output", withheld),
        ]
    stored = json.dumps(list(harness.fakes.safety.documents.values()), default=str)
    assert "k1ll" not in stored and "owls" not in stored  # never the words
    assert (await harness.fakes.safety.get("kid")).flags == []

    family_id = (await harness.agent.families.current("mum")).id
    users = {"mum-token": MUM, "kid-token": KID, "eve-token": EVE}
    api = ApiApp(harness.agent, StaticTokenVerifier(users), harness.settings)
    async with serving(api) as client:
        path = f"/api/spark/families/{family_id}/safety"
        answer = await client.get(path, headers={"Authorization": "Bearer mum-token"})
        assert answer.status_code == 200
        body = answer.json()
        assert [f["conversationId"] for f in body["flags"]] == [turned, withheld]
        fields = {"id", "memberId", "category", "direction", "conversationId", "at"}
        assert set(body["flags"][0]) == fields
        for other in ("kid-token", "eve-token"):
            refused = await client.get(path, headers={"Authorization": f"Bearer {other}"})
            assert refused.status_code == 404
            assert refused.json()["error"]["code"] == "family_not_found"


@FLAGGED_TURN
async def test_an_adult_moderated_under_everyone_raises_no_flag() -> None:
    provider = ScriptedProvider([Step.reply(MODEL_WORDS)])
    harness = await family(provider, ScriptedModerator(word_list), moderation="everyone")
    await run_frames(harness, DAD, FLAGGED)
    assert (await harness.fakes.safety.get("mum")).flags == []


async def test_a_dependents_runs_get_the_age_fit_addendum_and_an_adults_do_not() -> None:
    from shared.prompts import load_prompt

    addendum = load_prompt("dependent")
    provider = ScriptedProvider([Step.reply(MODEL_WORDS), Step.reply(MODEL_WORDS)])
    harness = await family(provider, ScriptedModerator(word_list), moderation="off")
    await run_frames(harness, KID, "What is seven times eight?")
    await run_frames(harness, MUM, "What is seven times eight?")
    kid, mum = provider.requests
    assert kid.system.endswith(addendum) and "Socratic" in kid.system
    assert "young learner" not in mum.system


async def test_a_dependents_flagged_family_message_is_refused_before_approval() -> None:
    from shared.agent.stream.events import ApprovalRequiredEvent, ToolEndEvent
    from tests.unit.test_family_tools import calls

    flagged = "you are worthless and nobody likes you"
    clean = "see you at dinner"
    provider = ScriptedProvider(
        [
            calls(("send_family_message", {"to": "mum", "text": flagged})),
            Step.reply("I could not send that."),
            calls(("send_family_message", {"to": "mum", "text": clean})),
        ]
    )
    harness = await family(provider, ScriptedModerator(word_list))
    conversation_id, frames = await run_frames(harness, KID, "tell mum something")
    assert not any(isinstance(f.event, ApprovalRequiredEvent) for f in frames)
    (ended,) = [f.event for f in frames if isinstance(f.event, ToolEndEvent)]
    assert ended.status == "error" and "not sent" in (ended.error or "")
    (flag,) = (await harness.fakes.safety.get("mum")).flags
    assert (flag.category, flag.direction) == ("harassment", "output")
    # A clean message is judged, then waits for approval as ever.
    _, frames = await run_frames(harness, KID, "tell mum about dinner", conversation_id)
    assert any(isinstance(f.event, ApprovalRequiredEvent) for f in frames)


async def test_the_moderator_is_sent_the_turn_as_the_screen_lets_it_leave() -> None:
    """The moderator is a provider too: words a member withholds (Mum, opted out) that
    the kid pastes into a turn are blanked for it as for the model, never sent."""
    from datetime import UTC, datetime

    from shared.egress.provenance import Given

    moderator = ScriptedModerator(word_list)
    provider = ScriptedProvider([Step.reply("Noted.")])
    harness = await family(provider, moderator)
    mums = "pick me up behind the gym at half past four"
    given = Given("fm_1", "mum", mums, datetime(2026, 1, 1, tzinfo=UTC))
    await harness.fakes.provenance.record("kid", [given])
    await harness.agent.preferences.update("mum", ai_reads_family_messages=False)
    await run_frames(harness, KID, f"Mum said: {mums}. What does it mean?")
    judged = [text for text, _ in moderator.calls]
    assert all("behind the gym" not in str(r) for r in provider.requests), provider.requests
    assert judged and all("behind the gym" not in text for text in judged), judged


async def test_the_moderator_is_sent_a_family_message_as_the_screen_lets_it_leave() -> None:
    """A family message the kid's agent would send is judged before approval: words a
    member withholds (Mum, opted out) are blanked in what the moderator is sent."""
    from datetime import UTC, datetime

    from shared.egress.provenance import Given
    from tests.unit.test_family_tools import calls

    moderator = ScriptedModerator(word_list)
    mums = "pick me up behind the gym at half past four"
    provider = ScriptedProvider([calls(("send_family_message", {"to": "dad", "text": mums}))])
    harness = await family(provider, moderator)
    given = Given("fm_1", "mum", mums, datetime(2026, 1, 1, tzinfo=UTC))
    await harness.fakes.provenance.record("kid", [given])
    await harness.agent.preferences.update("mum", ai_reads_family_messages=False)
    await run_frames(harness, KID, "tell dad")
    judged = [text for text, _ in moderator.calls]
    assert any("[withheld]" in text for text in judged), judged
    assert all("behind the gym" not in text for text in judged), judged
