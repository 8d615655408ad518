"""Choosing the adapters for a process from its ``Settings``."""

from __future__ import annotations

from datetime import timedelta

from shared.agent.service import AgentService
from shared.auth.base import TokenVerifier
from shared.auth.tasks import LocalTaskVerifier, RefuseAllTaskCalls, TaskCallerVerifier
from shared.clock import Clock, SystemClock
from shared.config import Settings
from shared.ids import IdGenerator, RandomIds
from shared.llm.base import ModelProvider
from shared.prompts import load_prompt, prompts_dir
from shared.queue.base import TaskQueue
from shared.store.base import ConversationStore, LessonStore, TaskLedgerStore
from shared.tasks.ledger import LedgerPolicy
from shared.tasks.scheduler import TaskScheduler
from shared.tools.base import ToolRegistry
from shared.tools.lessons import create_lesson_tool
from shared.tools.skills import load_skill_tool


def build_provider(settings: Settings, clock: Clock) -> ModelProvider:
    """The OpenAI(-compatible) provider, or the offline model when none is configured."""
    if settings.offline_model:
        from shared.llm.offline import OfflineProvider

        return OfflineProvider(clock, settings.offline_token_delay_ms / 1000)
    from shared.llm.openai import OpenAIProvider

    return OpenAIProvider.connect(settings.model, settings.openai_api_key, settings.openai_base_url)


def build_tools(lessons: LessonStore, provider: ModelProvider, clock: Clock) -> ToolRegistry:
    """Every tool the agent may use."""
    return ToolRegistry(
        [
            load_skill_tool(prompts_dir() / "skills"),
            create_lesson_tool(lessons, provider, clock, load_prompt("lesson")),
        ]
    )


def build_queue(settings: Settings) -> TaskQueue:
    from shared.queue.cloudtasks import CloudTasksQueue

    return CloudTasksQueue.connect(
        settings.project_id,
        settings.tasks_location,
        settings.tasks_queue,
        settings.tasks_url,
        settings.tasks_service_account,
        emulator_host=settings.tasks_emulator_host,
        local_key=settings.tasks_local_key,
    )


def assemble(
    settings: Settings,
    store: ConversationStore,
    ledger: TaskLedgerStore,
    lessons: LessonStore,
    queue: TaskQueue,
    provider: ModelProvider,
    clock: Clock,
    ids: IdGenerator | None = None,
) -> AgentService:
    """An agent service on the given adapters (real ones here, fakes in tests)."""
    policy = LedgerPolicy(
        max_running=settings.tasks_per_user,
        lease=timedelta(seconds=settings.task_lease_seconds),
    )
    return AgentService(
        store=store,
        provider=provider,
        clock=clock,
        ids=ids or RandomIds(),
        settings=settings,
        system_prompt=load_prompt("base"),
        tools=build_tools(lessons, provider, clock),
        scheduler=TaskScheduler(ledger, store, queue, clock, policy),
    )


def build_service(settings: Settings) -> AgentService:
    """The agent on Firestore (or its emulator), Cloud Tasks and the configured model."""
    from shared.store.firestore import (
        FirestoreConversationStore,
        FirestoreLessonStore,
        FirestoreTaskLedgerStore,
    )

    clock = SystemClock()
    return assemble(
        settings,
        FirestoreConversationStore.connect(settings.project_id),
        FirestoreTaskLedgerStore.connect(settings.project_id),
        FirestoreLessonStore.connect(settings.project_id),
        build_queue(settings),
        build_provider(settings, clock),
        clock,
    )


def build_verifier(settings: Settings) -> TokenVerifier:
    from shared.auth.firebase import FirebaseTokenVerifier

    return FirebaseTokenVerifier(settings.project_id, check_revoked=settings.check_revoked)


def build_task_verifier(settings: Settings) -> TaskCallerVerifier:
    """OIDC in production; the local signature (or nothing at all) elsewhere."""
    if settings.in_production:
        from shared.auth.oidc import OidcTaskVerifier

        assert settings.tasks_service_account is not None  # Settings.check insists
        return OidcTaskVerifier(settings.tasks_url, settings.tasks_service_account)
    if settings.tasks_local_key:
        return LocalTaskVerifier(settings.tasks_local_key)
    return RefuseAllTaskCalls()
