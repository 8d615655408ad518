"""What a run is given: its limits, its backends, and where its task calls go.

A run receives one frozen ``RunDeps`` bundle, never the service that opened it, so the
loop depends only on these interfaces (DESIGN §2: dependencies point inward).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from shared.agent.files import AttachmentBudget
from shared.agent.runs import QueueLimits
from shared.clock import Clock
from shared.llm.base import ModelProvider
from shared.schemas.documents import ActiveRun
from shared.schemas.server import TaskRecord
from shared.store.base import ConversationStore
from shared.store.files import FileStore
from shared.tools.base import ToolRegistry

Call = tuple[str, str, str]
"""(tool call id, tool name, display text)"""


class TaskSink(Protocol):
    """Where a run hands its task tool calls (``TaskScheduler`` implements it)."""

    async def submit(
        self, user_id: str, conversation_id: str, calls: Sequence[Call], again: bool = False
    ) -> list[TaskRecord]:
        """Record the calls' tasks in the user's ledger; returns the attempts granted
        now, to ``dispatch`` once the run's message is saved (``again``: queue anew a
        task that ended cancelled).

        Raises:
            StoreError: nothing was recorded.
        """
        ...

    async def dispatch(self, user_id: str, records: Sequence[TaskRecord]) -> None:
        """Enqueue granted attempts (an attempt not enqueued is granted again later).

        Raises:
            QueueUnavailable: from the first attempt the queue refused.
        """
        ...

    async def hand_on(self, user_id: str, conversation_id: str, run: ActiveRun) -> None:
        """Have a task produce the queued ``run`` that ending this one opened."""
        ...

    async def expire_client_calls(
        self, user_id: str, conversation_id: str, call_ids: Sequence[str], delay_seconds: float
    ) -> None:
        """Give the client calls a synthetic result if still unanswered after the delay."""
        ...

    async def release_run(self, user_id: str, run_id: str, tokens: int) -> None:
        """Free the run's slot (if it took one) and count its tokens against today's."""
        ...


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


@dataclass(frozen=True, slots=True)
class RunDeps:
    """What a run needs, and nothing else."""

    store: ConversationStore
    model: ModelProvider
    tools: ToolRegistry
    clock: Clock
    limits: RunLimits
    system_prompt: str
    tasks: TaskSink
    files: FileStore
