"""Building an ``AgentService`` on fakes."""

from __future__ import annotations

from dataclasses import dataclass, replace

from shared.agent.events import AgentEvent
from shared.agent.service import AgentService
from shared.auth.base import User
from shared.clock import Clock, SystemClock
from shared.config import Settings
from shared.ids import SequentialIds
from shared.llm.base import ModelProvider
from shared.queue.memory import InMemoryTaskQueue
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.tools.base import ToolRegistry
from shared.wiring import assemble

ALICE = User(uid="alice", name="Alice Teacher")
BOB = User(uid="bob")


@dataclass
class Fakes:
    store: InMemoryConversationStore
    ledger: InMemoryTaskLedgerStore
    lessons: InMemoryLessonStore
    queue: InMemoryTaskQueue


def make_service(
    provider: ModelProvider,
    store: InMemoryConversationStore | None = None,
    clock: Clock | None = None,
    tools: ToolRegistry | None = None,
    fakes: Fakes | None = None,
    **settings: int,
) -> AgentService:
    fakes = fakes or Fakes(
        store or InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
        InMemoryTaskQueue(),
    )
    service = assemble(
        replace(Settings(), **settings),
        fakes.store,
        fakes.ledger,
        fakes.lessons,
        fakes.queue,
        provider,
        clock or SystemClock(),
        ids=SequentialIds(),
    )
    service.system_prompt = "You are Spark AI Agent."
    if tools is not None:
        service.tools = tools
    return service


async def run_to_end(
    service: AgentService, user: User, text: str, conversation_id: str | None = None
) -> tuple[str, list[AgentEvent]]:
    run = await service.start(user, text, conversation_id)
    events: list[AgentEvent] = []
    await run.execute(events.append)
    return run.conversation_id, events
