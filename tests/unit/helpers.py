"""Building an ``AgentService`` on fakes."""

from __future__ import annotations

from dataclasses import replace

from shared.agent.events import AgentEvent
from shared.agent.service import AgentService
from shared.auth.base import User
from shared.clock import Clock, SystemClock
from shared.config import Settings
from shared.ids import SequentialIds
from shared.llm.base import ModelProvider
from shared.store.memory import InMemoryConversationStore

ALICE = User(uid="alice", name="Alice Teacher")
BOB = User(uid="bob")


def make_service(
    provider: ModelProvider,
    store: InMemoryConversationStore | None = None,
    clock: Clock | None = None,
    **settings: int,
) -> AgentService:
    return AgentService(
        store=store or InMemoryConversationStore(),
        provider=provider,
        clock=clock or SystemClock(),
        ids=SequentialIds(),
        settings=replace(Settings(), **settings),
        system_prompt="You are Spark AI Agent.",
    )


async def run_to_end(
    service: AgentService, user: User, text: str, conversation_id: str | None = None
) -> tuple[str, list[AgentEvent]]:
    run = await service.start(user, text, conversation_id)
    events: list[AgentEvent] = []
    await run.execute(events.append)
    return run.conversation_id, events
