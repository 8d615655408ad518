"""Configuration, read from the environment in one place and injected everywhere else.

``Settings`` declares every variable (``declaration.setting``); its first fields, where a
process runs and what it reaches, are ``deployment.Deployment``'s, and the choice of
providers and models is ``providers``'.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from shared.config.declaration import Setting, read, setting
from shared.config.deployment import Deployment
from shared.config.providers import (
    DEFAULT_AUDIO_MODELS,
    DEFAULT_TRANSCRIBE_MODEL,
    PROVIDER_FIELDS,
    AudioPurpose,
    Provider,
    parse_model,
)
from shared.errors import ConfigurationError

# The audio choices are imported from here as well as from ``providers`` (by the wiring).
__all__ = [
    "DEFAULT_AUDIO_MODELS",
    "DEFAULT_LESSON_VERSIONS_KEPT",
    "KEY_VARIABLE",
    "SETTINGS",
    "AudioPurpose",
    "Settings",
]

# Earlier versions kept of each lesson (SPARK_LESSON_VERSIONS_KEPT); the stores' default.
DEFAULT_LESSON_VERSIONS_KEPT = 20


@dataclass(frozen=True)
class Settings(Deployment):
    """Everything the functions need to know about their environment: each field is
    declared once, with its variable, default, bounds and meaning (``setting``), and
    ``from_env`` reads them all from that declaration.

    Each value has a working local default, so ``make dev`` runs with none set.
    """

    throttle_ms: int = setting(
        "SPARK_THROTTLE_MS", 500, "minimum time between streaming writes of one message", minimum=0
    )
    keepalive_seconds: int = setting(
        "SPARK_KEEPALIVE_SECONDS", 15, "silence before a ``: keep-alive`` comment"
    )
    run_lease_seconds: int = setting(
        "SPARK_RUN_LEASE_SECONDS", 90, "a run's lease, renewed by each streaming write"
    )
    provider_idle_seconds: int = setting(
        "SPARK_PROVIDER_IDLE_SECONDS",
        60,
        "a model stream that sends nothing this long fails the run (not the connect timeout)",
    )
    watchdog_grace_seconds: int = setting(
        "SPARK_WATCHDOG_GRACE_SECONDS",
        30,
        "a watchdog checks a run this long after its lease lapses (DESIGN §7: within 60 s)",
        minimum=0,
    )
    client_tool_timeout_seconds: int = setting(
        "SPARK_CLIENT_TOOL_TIMEOUT_SECONDS",
        300,
        "a client-executed tool not answered this long gets an error result",
    )
    live_doc_bytes: int = setting(
        "SPARK_LIVE_DOC_BYTES",
        256 * 1024,
        "the live conversation document's budget: older messages roll over into archive/",
        minimum=16_384,
    )
    # Per-user limits (OWASP API4 / LLM10): each answered with 429 and Retry-After.
    runs_per_user: int = setting("SPARK_RUNS_PER_USER", 3, "replies at once per user")
    daily_tokens_per_user: int = setting(
        "SPARK_DAILY_TOKENS_PER_USER", 2_000_000, "model tokens a day per user"
    )
    # Providers bill input read from their prompt cache at a tenth (Anthropic, OpenAI's
    # newer models) to a half of the price (docs/costs.md).
    cached_input_percent: int = setting(
        "SPARK_CACHED_INPUT_PERCENT",
        10,
        "the share (per cent, 0 to 100) of a cached input token a user's daily tokens are charged",
        minimum=0,
    )
    daily_uploads_per_user: int = setting(
        "SPARK_DAILY_UPLOADS_PER_USER", 100, "upload sessions a day per user"
    )
    retention_days: int = setting(
        "SPARK_RETENTION_DAYS",
        0,
        "conversations untouched this many days are deleted by a daily sweep (0: never)",
        minimum=0,
        shown="0 (off)",
    )
    resume_streams_per_user: int = setting(
        "SPARK_RESUME_STREAMS_PER_USER",
        10,
        "resume streams (GET .../stream) one user may hold open on one instance",
    )
    task_calls_per_step: int = setting(
        "SPARK_TASK_CALLS_PER_STEP", 5, "task calls the model may make in one step"
    )
    tasks_queued_per_user: int = setting(
        "SPARK_TASKS_QUEUED_PER_USER", 20, "tasks waiting or running per user"
    )
    queued_messages_per_conversation: int = setting(
        "SPARK_QUEUED_MESSAGES_PER_CONVERSATION",
        10,
        "messages that may wait behind a live run in one conversation (``whenBusy: queue``)",
    )
    # At least one message of the largest kind (32 KiB of text and ten attachments'
    # references, under 64 KiB).
    queued_message_bytes: int = setting(
        "SPARK_QUEUED_MESSAGE_BYTES",
        128 * 1024,
        "the bytes the messages waiting in one conversation may take together (as stored)",
        minimum=65_536,
    )
    history_chars: int = setting(
        "SPARK_HISTORY_CHARS",
        200_000,
        "the history sent to the model is cut, oldest first, past this many characters",
        minimum=1000,
    )
    # What one model call is shown of the attachments, newest first (DESIGN §9).
    attachment_images: int = setting(
        "SPARK_ATTACHMENT_IMAGES", 4, "images one model call is shown", minimum=0
    )
    attachment_image_bytes: int = setting(
        "SPARK_ATTACHMENT_IMAGE_BYTES",
        10 * 1024 * 1024,
        "image bytes one model call is shown",
        minimum=0,
    )
    attachment_text_chars: int = setting(
        "SPARK_ATTACHMENT_TEXT_CHARS",
        60_000,
        "characters of attached text one model call is shown",
        minimum=0,
    )
    # Normalising a large image takes most of an instance's 512 MiB and its fraction of
    # a CPU (docs/concepts/attachments.md; bench/attachments.py times it), so one at a
    # time: more would add memory, not speed.
    attachment_decodes_at_once: int = setting(
        "SPARK_ATTACHMENT_DECODES_AT_ONCE",
        1,
        "attachments read and made ready at once per process",
    )
    # A voice clip is decoded in a child process with its CPU and memory capped
    # (docs/voice.md; bench/audio_decode.py measures the hostile corpus against the
    # caps): one at a time leaves the api's 512 MiB room to spare, and an instance's
    # fraction of a CPU would decode two no faster. The others wait, unread.
    voice_decodes_at_once: int = setting(
        "SPARK_VOICE_DECODES_AT_ONCE",
        1,
        "voice clips decoded at once per process (each in a child process); the others wait",
    )
    max_steps: int = setting("SPARK_MAX_STEPS", 10, "model calls in one reply")
    history_messages: int = setting(
        "SPARK_HISTORY_MESSAGES", 20, "messages of history sent to the model (at least)"
    )
    # The window moves in steps, so that one model request extends the one before and
    # the provider's prompt cache holds (docs/concepts/prompt-cache.md).
    history_step: int = setting(
        "SPARK_HISTORY_STEP",
        10,
        "the history window moves this many messages at once: it holds between "
        "``SPARK_HISTORY_MESSAGES`` and that plus this, less one",
    )
    tool_output_chars: int = setting(
        "SPARK_TOOL_OUTPUT_CHARS", 8000, "characters of one tool's output the model is shown"
    )
    # Not read from the environment: the edge's own bound on a request body.
    max_request_bytes: int = 1024 * 1024
    # An AI SDK chat's body carries its files as data: URLs (25 MB is 33.3 MB of
    # base64), and the transport posts the whole conversation: Cloud Run's own bound.
    max_chat_request_bytes: int = 32 * 1024 * 1024
    # Reading a chat body costs up to about 3.5 times its size at its peak (a data:
    # URL's string as the parser gathers it and as a str, then its file's bytes, then
    # that file read back to be made ready:
    # docs/concepts/ai-sdk.md; bench/chat_memory.py measures it), so the bodies one
    # instance reads at once are held to a budget that leaves its 512 MiB room.
    chat_body_budget_bytes: int = setting(
        "SPARK_CHAT_BODY_BUDGET_BYTES",
        64 * 1024 * 1024,
        "the bytes of AI SDK chat bodies (as each declares its length; one that does not "
        "counts as the largest, 32 MiB) one process reads at once",
        minimum=32 * 1024 * 1024,
    )
    chat_body_wait_seconds: int = setting(
        "SPARK_CHAT_BODY_WAIT_SECONDS",
        5,
        "how long a chat body waits for room in that budget before it is refused (503, "
        "with Retry-After)",
        minimum=0,
    )
    lesson_versions_kept: int = setting(
        "SPARK_LESSON_VERSIONS_KEPT",
        DEFAULT_LESSON_VERSIONS_KEPT,
        "earlier versions kept of each lesson, for its owner to restore (the oldest go first)",
    )
    offline_token_delay_ms: int = setting(
        "SPARK_OFFLINE_TOKEN_DELAY_MS",
        15,
        "the offline model's pause between words (local only)",
        minimum=0,
    )
    check_revoked: bool = setting(
        "SPARK_CHECK_REVOKED",
        default=False,
        meaning="also ask Firebase Auth whether the token was revoked",
    )
    app_url: str = setting(
        "SPARK_APP_URL",
        "http://127.0.0.1:5173",
        "the web app's origin: invite links are {app_url}/join?token=…",
    )
    voice_max_seconds: int = setting(
        "SPARK_VOICE_MAX_SECONDS",
        120,
        "the longest voice clip, in seconds of its decoded sound (never the client's word)",
    )
    transcribe_model: str = setting(
        "SPARK_TRANSCRIBE_MODEL",
        "",
        "what transcribes voice clips, ``provider:model`` (``openai`` or ``google``: "
        "Anthropic's models take no audio); a bare name is OpenAI's",
        shown=f"openai:{DEFAULT_TRANSCRIBE_MODEL}",
    )
    family_max_members: int = setting(
        "SPARK_FAMILY_MAX_MEMBERS", 10, "the members a family may hold", minimum=2
    )
    family_invites_per_hour: int = setting(
        "SPARK_FAMILY_INVITES_PER_HOUR", 20, "invite links a user may ask for in an hour"
    )
    family_joins_per_hour: int = setting(
        "SPARK_FAMILY_JOINS_PER_HOUR",
        10,
        "joins a user may try in an hour (tokens cannot be guessed by trying)",
    )
    family_messages_per_minute: int = setting(
        "SPARK_FAMILY_MESSAGES_PER_MINUTE",
        20,
        "verbatim messages to family members a user may send in any minute (typed or "
        "sent by their agent)",
    )
    # At least one message of the largest kind (32 KiB of text and ten attachments'
    # references, under 64 KiB), so that every message can go in an hour.
    family_message_bytes_per_hour: int = setting(
        "SPARK_FAMILY_MESSAGE_BYTES_PER_HOUR",
        1024 * 1024,
        "the bytes (as stored: text and files' references) of the verbatim messages to "
        "family members a user may send in any hour",
        minimum=65_536,
    )

    # Young learners (DESIGN §16): who is moderated, and what a moderator's failure means.
    moderation: str = setting(
        "SPARK_MODERATION",
        "dependents",
        "whose turns and replies are moderated: ``off``, ``dependents`` (a family's "
        "dependents) or ``everyone``",
    )
    moderation_fail: str = setting(
        "SPARK_MODERATION_FAIL",
        "closed",
        "what a dependent's turn does when the moderator fails or is late: ``closed`` (it "
        "is not answered; they are asked to try again) or ``open`` (it goes on); an "
        "adult's always goes on",
    )
    moderation_seconds: int = setting(
        "SPARK_MODERATION_SECONDS",
        10,
        "how long the moderator may take over one verdict before it counts as failed",
    )
    moderation_model: str = setting(
        "SPARK_MODERATION_MODEL",
        "omni-moderation-latest",
        "OpenAI's moderation model (used when OPENAI_API_KEY is set)",
    )
    helpline: str = setting(
        "SPARK_HELPLINE",
        "Childline on 0800 1111 (free, any time, and it will not show on a phone bill)",
        "the helpline a young learner is given when what they wrote speaks of self-harm",
    )

    # Voice (DESIGN §9): live audio goes from the browser to the provider with a secret
    # the api mints; spoken replies are made by the provider and cached per message.
    voice_sessions_per_day: int = setting(
        "SPARK_VOICE_SESSIONS_PER_DAY",
        20,
        "live-audio sessions (provider secrets) a user may start a day",
    )
    voice_secret_seconds: int = setting(
        "SPARK_VOICE_SECRET_SECONDS",
        60,
        "how long a live-audio secret may be used to open its connection",
        minimum=10,
    )
    voice_session_minutes: int = setting(
        "SPARK_VOICE_SESSION_MINUTES",
        30,
        "how long a live-audio session lasts (its transcripts are sent as voice messages)",
    )
    live_model: str = setting(
        "SPARK_LIVE_MODEL",
        "",
        "``provider:model`` of live audio; empty: SPARK_MODEL's provider's default",
        shown="openai:gpt-4o-mini-transcribe",
    )
    speech_model: str = setting(
        "SPARK_SPEECH_MODEL",
        "",
        "``provider:model`` of spoken replies; empty: SPARK_MODEL's provider's default",
        shown="openai:gpt-4o-mini-tts",
    )
    speech_voice: str = setting(
        "SPARK_SPEECH_VOICE",
        "",
        "the voice of spoken replies; empty: the provider's default",
        shown="fable",
    )
    offline_voice: bool = setting(
        "SPARK_OFFLINE_VOICE",
        default=True,
        meaning="with no provider key, transcribe voice clips with the local Whisper model "
        "and read replies aloud with espeak-ng, where `make setup` installed them",
    )

    # Cloud Tasks (DESIGN §6).
    tasks_per_user: int = setting("SPARK_TASKS_PER_USER", 3, "tasks running at once per user")
    task_max_attempts: int = setting("SPARK_TASK_MAX_ATTEMPTS", 3, "attempts of one task")
    task_retry_base_ms: int = setting(
        "SPARK_TASK_RETRY_BASE_MS", 2000, "the base of a task's retry backoff", minimum=0
    )
    task_lease_seconds: int = setting(
        "SPARK_TASK_LEASE_SECONDS", 120, "a running task's lease, renewed while it works"
    )
    tasks_queue: str = setting("CLOUD_TASKS_QUEUE", "spark-tasks", "the task queue")
    tasks_location: str = setting("CLOUD_TASKS_LOCATION", "europe-west2", "the task queue's region")
    tasks_url: str = setting(
        "SPARK_TASKS_URL",
        "http://127.0.0.1:8081/",
        "the ``tasks`` function's URL (task target, OIDC audience)",
    )
    tasks_service_account: str | None = setting(
        "CLOUD_TASKS_SERVICE_ACCOUNT",
        None,
        "the account tasks' OIDC tokens are issued for (required in production)",
    )
    tasks_emulator_host: str | None = setting(
        "CLOUD_TASKS_EMULATOR_HOST", None, "use the Cloud Tasks emulator (plain gRPC)"
    )
    tasks_local_key: str | None = setting(
        "SPARK_TASKS_LOCAL_KEY",
        None,
        "local only: sign task bodies, and accept task calls signed with it instead of OIDC",
        secret=True,
    )

    # Observability (docs/observability.md): shared/observe/setup.py and shared/appcheck/.
    telemetry: str = setting(
        "SPARK_TELEMETRY",
        "off",
        "where traces and metrics go: ``off``, ``otlp`` (make dev's local viewer) or "
        "``gcp`` (Cloud Trace and Cloud Monitoring)",
    )
    otlp_endpoint: str | None = setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT", None, "the OTLP/HTTP receiver ``otlp`` sends to"
    )
    trace_content: bool = setting(
        "SPARK_TRACE_CONTENT",
        default=False,
        meaning="development only: record prompts and replies in spans (refused in production)",
    )
    app_check: str = setting(
        "SPARK_APP_CHECK", "off", "App Check of the api's calls: off, monitor or enforce"
    )
    app_check_jwks_url: str | None = setting(
        "SPARK_APP_CHECK_JWKS_URL",
        None,
        "local only: where App Check's keys are read (Google's by default)",
    )
    project_number: str | None = setting(
        "SPARK_PROJECT_NUMBER",
        None,
        "the project's number: App Check tokens' issuer and audience name it",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``env`` (default: ``os.environ``) and check them."""
        env = os.environ if env is None else env
        # SPARK_MODEL first: of several bad variables, it is the one reported.
        provider, model = parse_model(read(env, *SETTINGS["model"]))
        values = {
            name: read(env, s, default)
            for name, (s, default) in SETTINGS.items()
            if name != "model"
        }
        settings = cls(**values, provider=provider, model=model)
        for purpose in DEFAULT_AUDIO_MODELS:  # a misspelt audio model refuses to start
            settings.audio_model(purpose)
        settings.transcription  # noqa: B018 (refuses a bad SPARK_TRANSCRIBE_MODEL now)
        _one_of("SPARK_MODERATION", settings.moderation, MODERATION_MODES)
        _one_of("SPARK_MODERATION_FAIL", settings.moderation_fail, MODERATION_FAILURES)
        settings.check()
        return settings

    def check(self) -> None:
        """Refuse configurations that must never run.

        The Auth emulator accepts unsigned tokens, so honouring it in production would
        let anyone sign in as anyone; the Firestore emulator would silently lose data.
        """
        if not self.in_production:
            return
        for name, note, refusal in _LOCAL_ONLY:
            if getattr(self, name):
                raise ConfigurationError(
                    f"{SETTINGS[name][0].names[0]}{note} is set while running in production "
                    f"(K_SERVICE={self.cloud_service}); {refusal}."
                )
        if not self.tasks_service_account or not self.tasks_url.startswith("https://"):
            raise ConfigurationError(
                "Cloud Tasks needs CLOUD_TASKS_SERVICE_ACCOUNT and an https SPARK_TASKS_URL "
                "(the tasks function's URL) in production."
            )
        if not self.app_url.startswith("https://"):
            raise ConfigurationError(
                "SPARK_APP_URL must be the web app's https origin in production (invite "
                f"links point there), not {self.app_url!r}."
            )
        if self.provider_key is None:
            raise ConfigurationError(
                f"SPARK_MODEL chooses {self.provider}:{self.model} but "
                f"{KEY_VARIABLE[self.provider]} is not set; refusing to start in production."
            )
        if self.project_id.startswith("demo-"):
            # Firebase's emulators alone serve ``demo-`` projects: the store, the queue
            # and the bucket would all be missing, or be someone's local ones.
            raise ConfigurationError(
                f"GOOGLE_CLOUD_PROJECT is {self.project_id!r}, an emulator-only project, "
                "in production; set it to the project's id. Refusing to start."
            )


MODERATION_MODES = ("off", "dependents", "everyone")
MODERATION_FAILURES = ("closed", "open")


def _one_of(variable: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigurationError(f"{variable} must be one of {', '.join(allowed)}, not {value!r}.")


_LOCAL_ONLY: tuple[tuple[str, str, str], ...] = (
    # (field, a note after its variable, what is refused), checked in this order.
    ("auth_emulator_host", "", "refusing to accept unsigned tokens"),
    ("firestore_emulator_host", "", "refusing to start"),
    ("storage_emulator_host", "", "refusing to start"),
    ("tasks_emulator_host", "", "refusing to start"),
    ("tasks_local_key", " (local task mode)", "refusing to accept unsigned task calls"),
    ("trace_content", "", "refusing to record what people said in traces"),
    ("app_check_jwks_url", "", "refusing App Check keys other than Google's"),
)
"""The settings only a local run may have: each refuses a start in production."""

SETTINGS: dict[str, tuple[Setting, Any]] = {
    f.name: (f.metadata["setting"], f.default) for f in fields(Settings) if "setting" in f.metadata
}
"""Every field read from the environment, by name: its declaration and its default."""

KEY_VARIABLE: dict[Provider, str] = {
    p: SETTINGS[key][0].names[0] for p, (key, _) in PROVIDER_FIELDS.items()
}
"""The variable holding each provider's API key (each SDK's own name for it)."""
