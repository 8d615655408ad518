"""Titles made after a conversation's first reply (DESIGN §15): through the egress,
bounded, written once with ``titleSource: "auto"``, never over a title its owner gave,
and never in the way of the reply."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from shared.agent.conversations.titles import MAX_AUTO_TITLE, TITLE_TOKENS, cleaned
from shared.errors import ProviderError
from shared.llm.base import ModelEvent, ModelRequest
from shared.llm.demo import respond
from shared.llm.scripted import ScriptedProvider, Step
from tests.unit.helpers import ALICE, Harness, make_service


async def first_reply(service: Harness, text: str = "Tell me about tides") -> str:
    sent = await service.agent.send(ALICE, text, None)
    assert sent.run is not None
    await sent.run.execute()
    return sent.conversation_id


def title_of(service: Harness, conversation_id: str) -> tuple[object, object]:
    document = service.store.document("alice", conversation_id)
    assert document is not None
    return document.get("title"), document.get("titleSource")


async def test_the_first_reply_titles_the_conversation_through_a_bounded_call() -> None:
    provider = ScriptedProvider(
        [Step.reply("Tides rise and fall twice a day."), Step.reply('"Tides explained."\nmore')]
    )
    service = make_service(provider, titles=True)
    cid = await first_reply(service)
    assert title_of(service, cid) == ("Tides explained", "auto")
    asked: ModelRequest = provider.requests[1]
    assert asked.max_tokens == TITLE_TOKENS and not asked.tools
    assert "Tell me about tides" in asked.messages[0].text
    assert "Tides rise and fall twice a day." in asked.messages[0].text


async def test_a_title_is_made_once_and_never_over_the_owners() -> None:
    provider = ScriptedProvider([Step.reply("One."), Step.reply("Auto title"), Step.reply("Two.")])
    service = make_service(provider, titles=True)
    cid = await first_reply(service)
    assert title_of(service, cid) == ("Auto title", "auto")
    sent = await service.agent.send(ALICE, "more", cid)
    assert sent.run is not None
    await sent.run.execute()  # titled already: no model call for a title (none scripted)
    assert len(provider.requests) == 3
    assert title_of(service, cid) == ("Auto title", "auto")


async def test_a_title_given_while_the_title_is_made_is_kept() -> None:
    provider = ScriptedProvider([Step.reply("One."), Step.reply("Auto title")])
    service = make_service(provider, titles=True)
    scripted = provider.stream
    renamed: list[str] = []
    sent = await service.agent.send(ALICE, "hello", None)
    assert sent.run is not None
    cid = sent.conversation_id

    async def stream(request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        if request.max_tokens == TITLE_TOKENS:
            # The owner names it while its title is being made: the title made loses.
            await service.agent.rename("alice", cid, "Mine")
            renamed.append(cid)
        async for event in scripted(request):
            yield event

    provider.stream = stream  # type: ignore[method-assign]
    await sent.run.execute()
    assert renamed == [cid]
    assert title_of(service, cid) == ("Mine", "user")


async def test_no_title_is_made_for_a_conversation_titled_already() -> None:
    provider = ScriptedProvider([Step.reply("One.")])  # no step for a title
    service = make_service(provider, titles=True)
    sent = await service.agent.send(ALICE, "hello", None)
    assert sent.run is not None
    await service.agent.rename("alice", sent.conversation_id, "Mine")
    await sent.run.execute()
    assert title_of(service, sent.conversation_id) == ("Mine", "user")


async def test_a_failed_title_is_ignored_and_the_reply_stands() -> None:
    provider = ScriptedProvider(
        [Step.reply("The reply."), Step(error=ProviderError("the provider failed"))]
    )
    service = make_service(provider, titles=True)
    cid = await first_reply(service)
    document = service.store.document("alice", cid)
    assert document is not None and "title" not in document
    assert document["messages"][-1]["content"][0]["text"] == "The reply."


async def test_a_background_send_is_titled_too() -> None:
    from tests.unit.test_tasks import deliver_all

    provider = ScriptedProvider([Step.reply("From a task."), Step.reply("Task title")])
    service = make_service(provider, titles=True)
    sent = await service.agent.send(ALICE, "hello there", None, background=True)
    await deliver_all(service, service.fakes.queue)
    assert title_of(service, sent.conversation_id) == ("Task title", "auto")


def test_a_title_is_cut_to_60_characters_at_a_word() -> None:
    long = "Word " * 30
    title = cleaned(long)
    assert len(title) <= MAX_AUTO_TITLE and title.endswith("Word")
    assert cleaned("  'Fractions for Year 4.'  ") == "Fractions for Year 4"
    assert cleaned("\n\n") == ""


def test_the_demo_model_titles_from_the_first_words() -> None:
    from shared.agent.conversations.titles import title_request
    from shared.prompts import load_prompt
    from shared.schemas.documents import Conversation

    conversation = Conversation.model_validate(
        {
            "id": "conv_1",
            "participantIds": ["alice"],
            "createdAt": "2026-01-01T00:00:00Z",
            "updatedAt": "2026-01-01T00:00:00Z",
            "lastMessageAt": "2026-01-01T00:00:00Z",
            "messages": [
                {
                    "id": "m1",
                    "role": "user",
                    "createdAt": "2026-01-01T00:00:00Z",
                    "status": "complete",
                    "content": [
                        {"type": "text", "text": "please make a short lesson about the water cycle"}
                    ],
                },
                {
                    "id": "m2",
                    "role": "assistant",
                    "createdAt": "2026-01-01T00:00:00Z",
                    "status": "complete",
                    "content": [{"type": "text", "text": "Here it is."}],
                },
            ],
        }
    )
    request = title_request(conversation, load_prompt("title"))
    assert request is not None
    assert respond(request).text == "Please make a short lesson about"
