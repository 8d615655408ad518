"""Building the agent on fakes."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
from functions_framework.aio import create_asgi_app
from spark_http.app import ApiApp

from shared.agent.facade import Agent
from shared.agent.run.deps import RunDeps
from shared.agent.run.loop import Run
from shared.agent.stream.events import UNSENT, AgentEvent
from shared.agent.stream.transcript import Frame
from shared.auth.accounts import InMemoryAccounts
from shared.auth.base import StaticTokenVerifier, User
from shared.budget.service import Budget
from shared.clock import Clock, SystemClock
from shared.config import Settings
from shared.egress.gate import Egress
from shared.egress.provenance import InMemoryProvenanceStore
from shared.egress.screen import Screen
from shared.families.preferences import Preferences
from shared.ids import SequentialIds
from shared.llm.base import ModelProvider
from shared.llm.moderation import Moderator
from shared.llm.transcribe import Transcriber
from shared.queue.memory import InMemoryTaskQueue
from shared.store.files import InMemoryFileStore
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryFamilyStore,
    InMemoryLessonStore,
    InMemoryOpeningStore,
    InMemorySettingsStore,
    InMemoryTaskDocumentStore,
    InMemoryTaskLedgerStore,
)
from shared.store.memory.feedback import InMemoryFeedbackStore
from shared.store.memory.safety import InMemorySafetyStore
from shared.tasks.handler import TaskHandler
from shared.tasks.scheduler import TaskScheduler
from shared.tools.base import ToolRegistry
from shared.wiring import assemble

ALICE = User(uid="alice", name="Alice Teacher")


class FreeMeter:
    """A meter that refuses nothing and counts nothing (a tool tried on its own)."""

    async def reserve(self, tokens: int, kind: str) -> str:
        return "free"

    async def settle(self, reservation: str, tokens: int) -> None:
        pass


class FreeBudget:
    def meter(self, user_id: str, task_id: str | None = None) -> FreeMeter:
        return FreeMeter()


def egress_of(provider: ModelProvider, transcriber: Transcriber | None = None) -> Egress:
    """``provider`` (and ``transcriber``) behind an egress of their own: no family text
    given yet, no budget."""
    preferences = Preferences(InMemorySettingsStore(), SystemClock())
    screen = Screen(InMemoryProvenanceStore(), preferences)
    return Egress(provider, screen, FreeBudget(), transcriber=transcriber)


BOB = User(uid="bob")


@dataclass
class Fakes:
    store: InMemoryConversationStore = field(default_factory=InMemoryConversationStore)
    ledger: InMemoryTaskLedgerStore = field(default_factory=InMemoryTaskLedgerStore)
    lessons: InMemoryLessonStore = field(default_factory=InMemoryLessonStore)
    queue: InMemoryTaskQueue = field(default_factory=InMemoryTaskQueue)
    files: InMemoryFileStore = field(default_factory=InMemoryFileStore)
    families: InMemoryFamilyStore = field(default_factory=InMemoryFamilyStore)
    settings: InMemorySettingsStore = field(default_factory=InMemorySettingsStore)
    provenance: InMemoryProvenanceStore = field(default_factory=InMemoryProvenanceStore)
    safety: InMemorySafetyStore = field(default_factory=InMemorySafetyStore)
    feedback: InMemoryFeedbackStore = field(init=False)
    # A send's admission with its message; none: the one over ``store`` and ``ledger``.
    openings: InMemoryOpeningStore | None = None
    # Sign-in accounts, the last thing an erasure deletes.
    auth: InMemoryAccounts = field(default_factory=InMemoryAccounts)

    def __post_init__(self) -> None:
        # Its records are kept only beside a conversation of ``store``'s.
        self.feedback = InMemoryFeedbackStore(self.store)

    @property
    def sections(self) -> InMemoryTaskDocumentStore:
        """The task sections, written with the ledger (``InMemoryTaskLedgerStore``)."""
        return self.ledger.sections


@dataclass
class Harness:
    """The agent of one process on fakes, and the fakes."""

    agent: Agent
    tasks: TaskHandler
    scheduler: TaskScheduler
    budget: Budget
    deps: RunDeps
    settings: Settings
    fakes: Fakes
    provider: ModelProvider  # behind the egress: its wire, for tests to look at

    @property
    def store(self) -> InMemoryConversationStore:
        return self.fakes.store

    def handler(self) -> TaskHandler:
        return self.tasks

    async def start(self, user: User, text: str, conversation_id: str | None = None) -> Run:
        sent = await self.agent.send(user, text, conversation_id)
        assert sent.run is not None
        return sent.run


def make_service(
    provider: ModelProvider,
    store: InMemoryConversationStore | None = None,
    clock: Clock | None = None,
    tools: ToolRegistry | None = None,
    fakes: Fakes | None = None,
    transcriber: Transcriber | None = None,
    moderator: Moderator | None = None,
    titles: bool = False,
    **settings: int | str,
) -> Harness:
    """The agent on fakes; ``titles``: conversations are titled after their first reply
    (off by default: a scripted model would be asked for each title)."""
    fakes = fakes or Fakes(store or InMemoryConversationStore())
    configured = replace(Settings(), **settings)
    components = assemble(
        configured,
        fakes.store,
        fakes.ledger,
        fakes.lessons,
        fakes.queue,
        provider,
        clock or SystemClock(),
        ids=SequentialIds(),
        tools=tools,
        system_prompt="You are Spark AI Agent.",
        files=fakes.files,
        sections=fakes.sections,
        families=fakes.families,
        settings_store=fakes.settings,
        transcriber=transcriber,
        openings=fakes.openings,
        provenance=fakes.provenance,
        auth=fakes.auth,
        moderator=moderator,
        safety=fakes.safety,
        feedback=fakes.feedback,
        titles=titles,
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


async def run_frames(
    service: Harness, user: User, text: str, conversation_id: str | None = None
) -> tuple[str, list[Frame]]:
    """The frames a client is sent (events it never sees, such as usage, left out)."""
    run = await service.start(user, text, conversation_id)
    frames: list[Frame] = []
    await run.execute(frames.append)
    return run.conversation_id, [f for f in frames if not isinstance(f.event, UNSENT)]


async def run_to_end(
    service: Harness, user: User, text: str, conversation_id: str | None = None
) -> tuple[str, list[AgentEvent]]:
    conversation_id, frames = await run_frames(service, user, text, conversation_id)
    return conversation_id, [f.event for f in frames]


def api_of(harness: Harness, settings: Settings | None = None) -> ApiApp:
    """The api on ``harness``'s agent (with ``settings``, by default the harness's);
    ``alice-token`` and ``bob-token`` sign in."""
    verifier = StaticTokenVerifier({"alice-token": ALICE, "bob-token": BOB})
    return ApiApp(harness.agent, verifier, settings or harness.settings)


@contextlib.asynccontextmanager
async def serving(api: ApiApp) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``api`` served by the real functions-framework app (in process)."""
    app = create_asgi_app(target="api", source=str(Path(__file__).with_name("ff_target.py")))
    sys.modules["ff_target"].current = api  # type: ignore[attr-defined]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        yield client
    await api.drain()


async def until(
    condition: Callable[[], bool | Awaitable[bool]], what: str, *, within: float = 30.0
) -> None:
    """Wait until ``condition()`` holds (a coroutine's answer is awaited): a test waits
    for what it needs to have happened, never for a clock. ``within`` seconds is only a
    net for a broken build (what happens here takes milliseconds), and ``what`` says
    what never came."""
    given_up = time.monotonic() + within
    while not await _holds(condition()):
        if time.monotonic() > given_up:
            raise AssertionError(f"waited {within:g} s for {what}")
        await asyncio.sleep(0.001)


async def _holds(answer: bool | Awaitable[bool]) -> bool:
    return await answer if inspect.isawaitable(answer) else answer
