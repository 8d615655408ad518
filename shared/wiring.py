"""Choosing the adapters for a process from its ``Settings``."""

from __future__ import annotations

from shared.agent.service import AgentService
from shared.auth.base import TokenVerifier
from shared.clock import Clock, SystemClock
from shared.config import Settings
from shared.ids import RandomIds
from shared.llm.base import ModelProvider
from shared.prompts import load_prompt


def build_provider(settings: Settings, clock: Clock) -> ModelProvider:
    """The OpenAI(-compatible) provider, or the offline model when none is configured."""
    if settings.offline_model:
        from shared.llm.offline import OfflineProvider

        return OfflineProvider(clock, settings.offline_token_delay_ms / 1000)
    from shared.llm.openai import OpenAIProvider

    return OpenAIProvider.connect(settings.model, settings.openai_api_key, settings.openai_base_url)


def build_service(settings: Settings) -> AgentService:
    """The agent on Firestore (or its emulator) and the configured model."""
    from shared.store.firestore import FirestoreConversationStore

    clock = SystemClock()
    return AgentService(
        store=FirestoreConversationStore.connect(settings.project_id),
        provider=build_provider(settings, clock),
        clock=clock,
        ids=RandomIds(),
        settings=settings,
        system_prompt=load_prompt("base"),
    )


def build_verifier(settings: Settings) -> TokenVerifier:
    from shared.auth.firebase import FirebaseTokenVerifier

    return FirebaseTokenVerifier(settings.project_id, check_revoked=settings.check_revoked)
