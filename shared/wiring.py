"""Choosing the adapters for a process from its ``Settings``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from shared.agent.chat import Chats
from shared.agent.conversations.manage import Conversations
from shared.agent.conversations.retention import Retention
from shared.agent.conversations.titles import Titles
from shared.agent.facade import Agent
from shared.agent.run.background import Background
from shared.agent.run.deps import RunDeps
from shared.agent.service import RunService
from shared.agent.stream.resume import Resumes
from shared.agent.waiting.people import People
from shared.agent.waiting.task_calls import TaskCalls
from shared.attachments.service import Attachments
from shared.attachments.uploads import Uploads
from shared.attachments.voice import VoiceClips
from shared.auth.accounts import Accounts, FirebaseAccounts, InMemoryAccounts
from shared.budget.allowance import UserLimits
from shared.budget.service import Budget
from shared.budget.voice_grants import VoiceLimits
from shared.clock import Clock, SystemClock
from shared.config import DEFAULT_AUDIO_MODELS, AudioPurpose, Settings
from shared.egress.gate import BOUNDS, Bound, Egress
from shared.egress.moderating import FailMode, Mode, ModerationPolicy
from shared.egress.provenance import InMemoryProvenanceStore, ProvenanceStore
from shared.egress.providers import (
    ModelProvider,
    Moderator,
    SecretMinter,
    Speaker,
    Transcriber,
)
from shared.egress.screen import Screen
from shared.erasure.service import Erasures
from shared.erasure.steps import Eraser, ErasureParts
from shared.export.contents import Sources
from shared.export.service import Exports
from shared.families.allowance import SendLimits
from shared.families.controls import ParentalControls
from shared.families.delivery import Delivery
from shared.families.preferences import Preferences
from shared.families.safety import SafetyFlags
from shared.families.service import Families
from shared.ids import IdGenerator, RandomIds
from shared.observe.setup import process_metrics, process_tracer
from shared.policies import family_policy_of, limits_of, task_policy_of
from shared.prompts import DEFAULT_DIR, load_prompt
from shared.queue.base import TaskQueue
from shared.store.accounts import AccountStore
from shared.store.base import (
    ConversationStore,
    FamilyStore,
    LessonStore,
    OpeningStore,
    PostStore,
    SettingsStore,
    TaskDocumentStore,
    TaskLedgerStore,
)
from shared.store.feedback import FeedbackStore
from shared.store.files import FileStore, InMemoryFileStore
from shared.store.memory import (
    InMemoryFamilyStore,
    InMemorySettingsStore,
    openings_beside,
    posts_beside,
    sections_beside,
)
from shared.store.memory.accounts import accounts_beside
from shared.store.memory.feedback import InMemoryFeedbackStore
from shared.store.memory.safety import InMemorySafetyStore
from shared.store.safety import SafetyStore
from shared.store.slots import RunSlots
from shared.tasks.handler import TaskHandler
from shared.tasks.ledger import LedgerPolicy
from shared.tasks.scheduler import TaskScheduler
from shared.tools.base import Tool, ToolRegistry
from shared.tools.documents import document_tools
from shared.tools.family import family_tools
from shared.tools.lessons import create_lesson_tool, plan_lessons_tool
from shared.tools.people import (
    ask_user_question_tool,
    delete_lesson_tool,
    get_editor_selection_tool,
    restore_lesson_tool,
)
from shared.tools.review import review_work_tool
from shared.tools.skills import discover_skills, load_skill_tool
from shared.voice.live import LiveSessions
from shared.voice.speech import SpokenReplies

if TYPE_CHECKING:
    from shared.store.firestore import FirestoreStores


def build_provider(settings: Settings, clock: Clock) -> ModelProvider:
    """The adapter of the provider ``SPARK_MODEL`` chooses, or the offline model when
    that provider has neither a key nor a base URL."""
    if settings.offline_model:
        from shared.llm.offline import OfflineProvider

        return OfflineProvider(clock, settings.offline_token_delay_ms / 1000)
    key, url = settings.provider_key, settings.provider_base_url
    if settings.provider == "anthropic":
        from shared.llm.anthropic import AnthropicProvider

        return AnthropicProvider.connect(settings.model, key, url)
    if settings.provider == "google":
        from shared.llm.gemini import GeminiProvider

        return GeminiProvider.connect(settings.model, key, url)
    from shared.llm.openai import OpenAIProvider

    return OpenAIProvider.connect(settings.model, key, url)


def build_voice(settings: Settings, clock: Clock) -> tuple[SecretMinter | None, Speaker | None]:
    """The live-audio and speech adapters of the providers the settings choose
    (``Settings.audio_model``); ``None`` for either without a provider (offline),
    except speech offline, which espeak-ng makes where installed (``SPARK_OFFLINE_VOICE``)."""

    def adapter(purpose: AudioPurpose) -> SecretMinter | Speaker | None:
        chosen = settings.audio_model(purpose)
        if chosen is None:
            return None
        live = DEFAULT_AUDIO_MODELS["live"].get(chosen.provider, "")
        speech = DEFAULT_AUDIO_MODELS["speech"].get(chosen.provider, "")
        models = (chosen.model, speech) if purpose == "live" else (live, chosen.model)
        if chosen.provider == "google":
            from shared.voice.gemini_voice import GeminiVoice

            return GeminiVoice.connect(
                chosen.api_key, chosen.base_url, clock, *models, settings.speech_voice
            )
        from shared.voice.openai_voice import OpenAIVoice

        return OpenAIVoice.connect(chosen.api_key, chosen.base_url, *models, settings.speech_voice)

    live, speaker = adapter("live"), adapter("speech")
    if speaker is None and settings.offline_model and settings.offline_voice:
        from shared.voice.espeak_voice import EspeakVoice

        speaker = EspeakVoice.find()
    return cast(SecretMinter | None, live), cast(Speaker | None, speaker)


def build_transcriber(settings: Settings) -> Transcriber | None:
    """What transcribes voice clips (``Settings.transcription``), or ``None`` when its
    provider has neither a key nor a base URL (offline: voice is refused plainly), unless
    the local Whisper model is installed (``SPARK_OFFLINE_VOICE``, ``make setup``)."""
    provider, model = settings.transcription
    key, url = settings.transcription_key, settings.transcription_base_url
    if key is None and url is None:
        if not (settings.offline_model and settings.offline_voice):
            return None
        from shared.voice.whisper_local import WhisperTranscriber

        return WhisperTranscriber.find()
    if provider == "google":
        from shared.llm.gemini import GeminiTranscriber

        return GeminiTranscriber.connect(model, key, url)
    from shared.llm.openai import OpenAITranscriber

    return OpenAITranscriber.connect(model, key, url)


def build_moderator(settings: Settings) -> Moderator | None:
    """What judges young learners' turns and replies (DESIGN §16): none with
    ``SPARK_MODERATION=off``; OpenAI's moderation when an OpenAI key (or base URL) is
    set; Gemini's safety ratings where Gemini is the model; else the offline word list,
    a stand-in (``offline_moderator.py`` says what it is not)."""
    if settings.moderation == "off":
        return None
    if settings.openai_api_key is not None or settings.openai_base_url is not None:
        from shared.llm.openai import OpenAIModerator

        return OpenAIModerator.connect(
            settings.openai_api_key, settings.openai_base_url, settings.moderation_model
        )
    if settings.provider == "google" and not settings.offline_model:
        from shared.llm.gemini import GeminiModerator

        return GeminiModerator.connect(
            settings.model, settings.provider_key, settings.provider_base_url
        )
    from shared.egress.offline_moderator import OfflineModerator

    return OfflineModerator()


def drafting_prompt(prompts: Path = DEFAULT_DIR) -> str:
    """What the model writing a lesson is told: the lesson prompt, then every exercise
    skill, so it knows each exercise's exact XML without asking."""
    skills = discover_skills(prompts / "skills").values()
    exercises = [skill.body for skill in skills if "<exercise" in skill.body]
    return "\n\n".join([load_prompt("lesson", prompts), *exercises])


def build_tools(
    lessons: LessonStore,
    models: Egress,
    clock: Clock,
    files: FileStore,
    prompts: Path = DEFAULT_DIR,
    family: Sequence[Tool[Any]] = (),
) -> ToolRegistry:
    """Every tool the agent may use, their prompts read from ``prompts`` (and the
    ``family`` tools, which need the family services ``assemble`` builds)."""
    drafting = drafting_prompt(prompts)
    return ToolRegistry(
        [
            load_skill_tool(prompts / "skills"),
            *document_tools(lessons, clock),
            create_lesson_tool(lessons, models, clock, drafting),
            plan_lessons_tool(lessons, models, clock, drafting, load_prompt("plan", prompts)),
            ask_user_question_tool(),
            get_editor_selection_tool(),
            delete_lesson_tool(lessons),
            restore_lesson_tool(lessons, clock),
            review_work_tool(files, lessons, models, load_prompt("review", prompts)),
            *family,
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


@dataclass(frozen=True)
class Components:
    """One process's agent (what the edges talk to) and the task handler (what the
    tasks function delegates to), on the adapters it was given; the scheduler, the
    budget and the run's dependencies too, for tests and benchmarks to look at."""

    agent: Agent
    handler: TaskHandler
    scheduler: TaskScheduler
    budget: Budget
    deps: RunDeps
    settings: Settings


def assemble(
    settings: Settings,
    store: ConversationStore,
    ledger: TaskLedgerStore,
    lessons: LessonStore,
    queue: TaskQueue,
    provider: ModelProvider,
    clock: Clock,
    ids: IdGenerator | None = None,
    tools: ToolRegistry | None = None,
    system_prompt: str | None = None,
    files: FileStore | None = None,
    families: FamilyStore | None = None,
    sections: TaskDocumentStore | None = None,
    posts: PostStore | None = None,
    settings_store: SettingsStore | None = None,
    live: SecretMinter | None = None,
    speaker: Speaker | None = None,
    transcriber: Transcriber | None = None,
    openings: OpeningStore | None = None,
    provenance: ProvenanceStore | None = None,
    accounts: AccountStore | None = None,
    auth: Accounts | None = None,
    moderator: Moderator | None = None,
    safety: SafetyStore | None = None,
    titles: bool = True,
    feedback: FeedbackStore | None = None,
) -> Components:
    """The agent on the given adapters (real ones here, fakes in tests); ``files``,
    ``families`` and ``settings_store`` default to empty in-memory stores, ``posts`` to
    the in-memory one over the conversations and families (when both are in memory),
    ``openings`` likewise over the conversations and the ledger;
    without ``live`` and ``speaker`` (an audio provider's) live audio and speech are
    refused as offline, and without ``transcriber`` voice clips are; without
    ``moderator`` nothing is moderated; ``titles``: whether conversations are titled
    after their first reply (a model call of its own)."""
    sections = sections if sections is not None else sections_beside(ledger)
    policy = LedgerPolicy(
        max_running=settings.tasks_per_user,
        lease=timedelta(seconds=settings.task_lease_seconds),
        max_waiting=settings.tasks_queued_per_user,
    )
    user_limits = UserLimits(
        settings.runs_per_user, settings.daily_tokens_per_user, settings.daily_uploads_per_user
    )
    scheduler = TaskScheduler(
        ledger, queue, clock, policy, timedelta(seconds=settings.watchdog_grace_seconds), sections
    )
    budget = Budget(
        ledger,
        clock,
        user_limits,
        VoiceLimits(
            settings.voice_sessions_per_day, timedelta(minutes=settings.voice_session_minutes)
        ),
    )
    slots = RunSlots(
        ledger,
        openings if openings is not None else openings_beside(store, ledger),
        clock,
        user_limits,
    )
    files = files if files is not None else InMemoryFileStore()
    ids = ids or RandomIds()
    limits = limits_of(settings)
    attachments = Attachments(files, settings.attachment_decodes_at_once)
    families = families if families is not None else InMemoryFamilyStore()
    household = Families(families, clock, ids, family_policy_of(settings))
    settings_store = settings_store if settings_store is not None else InMemorySettingsStore()
    provenance = provenance if provenance is not None else InMemoryProvenanceStore()
    safety = safety if safety is not None else InMemorySafetyStore()
    feedback = feedback if feedback is not None else InMemoryFeedbackStore(store)
    if accounts is None:
        held = (store, ledger, sections, lessons, families, settings_store, provenance, safety)
        accounts = accounts_beside((*held, feedback))
    flags = SafetyFlags(household, safety, clock)
    moderated = moderator is not None and settings.moderation != "off"
    controls = ParentalControls(household, families, clock, moderated=moderated)
    erasures = Erasures(accounts, families, queue, clock)
    preferences = Preferences(settings_store, clock, erasures)

    delivery = Delivery(
        posts if posts is not None else posts_beside(store, families),
        store,
        attachments,
        clock,
        ids,
        limits.live_doc_bytes,
        limits.history_messages,
        SendLimits(settings.family_messages_per_minute, settings.family_message_bytes_per_hour),
    )
    screen = Screen(provenance, preferences)
    egress = Egress(
        provider,
        screen,
        budget,
        speaker=speaker,
        transcriber=transcriber,
        minter=live,
        moderator=moderator,
        policy=ModerationPolicy(
            cast(Mode, settings.moderation),
            cast(FailMode, settings.moderation_fail),
            settings.helpline,
        ),
        roles=household,
        addendum=load_prompt("dependent", settings.prompts),
        bounds={"moderation": Bound(BOUNDS["moderation"].max_chars, settings.moderation_seconds)},
        tracer=process_tracer(),
        metrics=process_metrics(),
        cached_input_percent=settings.cached_input_percent,
        clock=clock,
    )
    family = family_tools(
        household, store, delivery, provenance, screen, clock, settings.tool_output_chars
    )
    deps = RunDeps(
        store=store,
        model=egress,
        tools=tools or build_tools(lessons, egress, clock, files, settings.prompts, family),
        clock=clock,
        limits=limits,
        system_prompt=(
            load_prompt("base", settings.prompts) if system_prompt is None else system_prompt
        ),
        tasks=scheduler,
        files=files,
        slots=slots,
        tombstones=erasures,
        flags=SafetyFlags(
            household, safety if safety is not None else InMemorySafetyStore(), clock
        ),
        titles=Titles(egress, store, load_prompt("title", settings.prompts)) if titles else None,
        guardians=controls,
    )
    background = Background()
    voice = VoiceClips(files, egress, settings.voice_max_seconds, settings.voice_decodes_at_once)
    runs = RunService(deps, ids, scheduler, lessons, attachments, background, voice)
    people = People(runs.continuation, deps, scheduler)
    uploads = Uploads(files, ids, clock, budget)
    conversations = Conversations(store, scheduler.sections, files, scheduler, clock, feedback)
    agent = Agent(
        runs,
        people,
        uploads,
        Resumes(store, settings.keepalive_seconds, settings.resume_streams_per_user),
        lessons,
        clock,
        background,
        settings.keepalive_seconds,
        household,
        delivery,
        preferences,
        Chats(runs.opening, people, store, uploads),
        Exports(
            Sources(
                store,
                lessons,
                sections,
                preferences,
                household,
                files,
                feedback,
            ),
            ledger,
            clock,
            tombstones=erasures,
        ),
        conversations,
        TaskCalls(store, clock),
        LiveSessions(
            egress,
            budget,
            clock,
            ids,
            timedelta(seconds=settings.voice_secret_seconds),
            timedelta(minutes=settings.voice_session_minutes),
        ),
        SpokenReplies(egress, store, files),
        erasures,
        Eraser(
            ErasureParts(
                accounts,
                families,
                store,
                ledger,
                files,
                auth if auth is not None else InMemoryAccounts(),
                queue,
                clock,
                runs.stop,
                scheduler.cancel_task,
            )
        ),
        Retention(store, conversations, queue, clock, settings.retention_days),
        flags,
        controls,
    )
    handler = TaskHandler(agent, clock, deps.tools, scheduler, budget, task_policy_of(settings))
    return Components(agent, handler, scheduler, budget, deps, settings)


def build_components(settings: Settings) -> tuple[Components, FirestoreStores]:
    """The agent on Firestore (or its emulator), Cloud Tasks and the configured model,
    with the Firestore stores (one client) so the caller can close them."""
    from shared.store.cloudstorage import connect as connect_files
    from shared.store.firestore import connect

    clock = SystemClock()
    stores = connect(settings.project_id, settings.lesson_versions_kept)
    files = connect_files(settings.project_id, settings.bucket, settings.storage_emulator_host)
    live, speaker = build_voice(settings, clock)
    components = assemble(
        settings,
        stores.conversations,
        stores.ledgers,
        stores.lessons,
        build_queue(settings),
        build_provider(settings, clock),
        clock,
        files=files,
        families=stores.families,
        sections=stores.sections,
        posts=stores.posts,
        settings_store=stores.settings,
        live=live,
        speaker=speaker,
        transcriber=build_transcriber(settings),
        openings=stores.openings,
        provenance=stores.provenance,
        accounts=stores.accounts,
        auth=FirebaseAccounts(settings.project_id),
        moderator=build_moderator(settings),
        safety=stores.safety,
        feedback=stores.feedback,
    )
    return components, stores
