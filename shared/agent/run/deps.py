"""What a run is given: its limits, its backends, and where its task calls go.

A run receives one frozen ``RunDeps`` bundle, never the service that opened it, so the
loop depends only on these interfaces (DESIGN §2: dependencies point inward).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from shared.agent.prompt.files import AttachmentBudget
from shared.agent.run.runs import QueueLimits
from shared.clock import Clock
from shared.egress.gate import Egress
from shared.llm.base import ProviderName, ToolSpec
from shared.queue.port import TaskPort
from shared.schemas.documents import Conversation
from shared.store.base import ConversationStore
from shared.store.files import FileStore
from shared.store.slots import RunSlots
from shared.tools.base import ToolRegistry


@dataclass(frozen=True, slots=True)
class RunLimits:
    """A run's limits; ``Settings`` holds their defaults (``policies.limits_of``)."""

    max_steps: int
    history_messages: int
    tool_output_chars: int
    throttle_seconds: float
    lease_seconds: float
    provider_idle_seconds: float
    client_tool_timeout_seconds: float
    live_doc_bytes: int
    task_calls_per_step: int
    history_chars: int
    attachments: AttachmentBudget
    queue: QueueLimits
    # The history window moves this many messages at once (``history.window_start``).
    history_step: int = 1
    # How often a producer that has not written lately checks for a stop or a takeover.
    poll_seconds: float = 1.0

    @property
    def lease(self) -> timedelta:
        """A run's lease, renewed by each of its writes."""
        return timedelta(seconds=self.lease_seconds)


class Tombstones(Protocol):
    """Whose accounts are being erased, or were (``Erasures.erased``)."""

    async def erased(self, user_ids: Sequence[str]) -> frozenset[str]:
        """Those of ``user_ids`` whose erasure has begun, as the store says now."""
        ...


class Titler(Protocol):
    """Titles a conversation after a reply, if it has no title (``titles.Titles``)."""

    async def title(self, user_id: str, conversation: Conversation) -> None:
        """Title ``conversation`` as its run's final write left it; never raises."""
        ...


class NoTombstones:
    """Nobody's account is being erased (a test's agent without erasures)."""

    async def erased(self, user_ids: Sequence[str]) -> frozenset[str]:
        return frozenset()


class Guardians(Protocol):
    """Parents' controls, judged at a send (``ParentalControls``, DESIGN §16)."""

    async def admit(self, user_id: str, *, voice: bool = False) -> bool:
        """Judge a send of ``user_id``'s (with a clip, ``voice``) before it is admitted,
        counting its turn; whether they are a dependent (their conversations open
        with a notice).

        Raises:
            ParentControls: a control forbids it (nothing is written).
        """
        ...


class Unguarded:
    """An agent without families: no one is a dependent."""

    async def admit(self, user_id: str, *, voice: bool = False) -> bool:
        return False


class Flagger(Protocol):
    """Who is told of a stop the moderator made (``SafetyFlags``: a dependent's parents)."""

    async def flag(
        self, member_id: str, category: str, direction: str, conversation_id: str, key: str
    ) -> None:
        """Record the stop (never raises: the reply stands either way)."""
        ...


class NoFlags:
    """The flagger of an agent without families: no one is told."""

    async def flag(
        self, member_id: str, category: str, direction: str, conversation_id: str, key: str
    ) -> None:
        return None


@dataclass(frozen=True, slots=True)
class RunDeps:
    """What a run needs, and nothing else."""

    store: ConversationStore
    model: Egress
    tools: ToolRegistry
    clock: Clock
    limits: RunLimits
    system_prompt: str
    tasks: TaskPort
    files: FileStore
    # The user's run slots, taken and freed in their ledger (``RunSlot``).
    slots: RunSlots
    # Read before a conversation is created: none is, for an account being erased.
    tombstones: Tombstones = field(default_factory=NoTombstones)
    # Told of each stop the moderator makes (DESIGN §16).
    flags: Flagger = field(default_factory=NoFlags)
    # Titles conversations after their first reply (none: they stay untitled).
    titles: Titler | None = None
    # Read before a send is admitted: a dependent's parents' controls (DESIGN §16).
    guardians: Guardians = field(default_factory=Unguarded)
    # What the model and the tools say of themselves, which holds for the process: read
    # once here, so a run builds each request from data rather than asking them again.
    label: str = field(init=False)
    provider: ProviderName = field(init=False)
    specs: tuple[ToolSpec, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", self.model.label)
        object.__setattr__(self, "provider", self.model.provider)
        object.__setattr__(self, "specs", self.tools.specs())
