"""What a run is given: its limits, its backends, and where its task calls go.

A run receives one frozen ``RunDeps`` bundle, never the service that opened it, so the
loop depends only on these interfaces (DESIGN §2: dependencies point inward).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from shared.agent.files import AttachmentBudget
from shared.agent.runs import QueueLimits
from shared.clock import Clock
from shared.llm.base import ModelProvider
from shared.queue.port import TaskPort
from shared.store.base import ConversationStore
from shared.store.files import FileStore
from shared.tools.base import ToolRegistry


@dataclass(frozen=True, slots=True)
class RunLimits:
    """A run's limits; ``Settings`` holds their defaults (``wiring.limits_of``)."""

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
    # How often a producer that has not written lately checks for a stop or a takeover.
    poll_seconds: float = 1.0

    @property
    def lease(self) -> timedelta:
        """A run's lease, renewed by each of its writes."""
        return timedelta(seconds=self.lease_seconds)


@dataclass(frozen=True, slots=True)
class RunDeps:
    """What a run needs, and nothing else."""

    store: ConversationStore
    model: ModelProvider
    tools: ToolRegistry
    clock: Clock
    limits: RunLimits
    system_prompt: str
    tasks: TaskPort
    files: FileStore
