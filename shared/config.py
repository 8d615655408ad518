"""Configuration, read from the environment in one place and injected everywhere else."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from shared.errors import ConfigurationError

DEFAULT_PROJECT = "demo-spark"
DEFAULT_MODEL = "gpt-4o-mini"
# Earlier versions kept of each lesson (SPARK_LESSON_VERSIONS_KEPT); the stores' default.
DEFAULT_LESSON_VERSIONS_KEPT = 20

Provider = Literal["openai", "anthropic", "google"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)

KEY_VARIABLE: dict[Provider, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google": "GEMINI_API_KEY",
}
"""The variable holding each provider's API key (each SDK's own name for it)."""


def parse_model(spec: str) -> tuple[Provider, str]:
    """``SPARK_MODEL`` as (provider, model): ``anthropic:claude-sonnet-4-5`` names its
    provider; a bare name (``gpt-4o-mini``, or a fine-tune's ``ft:…``) is OpenAI's."""
    prefix, colon, model = spec.partition(":")
    for provider in PROVIDERS:
        if colon and prefix.strip().lower() == provider:
            if not model.strip():
                raise ConfigurationError(f"SPARK_MODEL={spec!r} names no model after the colon")
            return provider, model.strip()
    return "openai", spec


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, not {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum}, not {value}")
    return value


def _bool(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigurationError(f"{name} must be true or false, not {raw!r}")


def _str(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _raw(env: Mapping[str, str], name: str) -> str | None:
    """The variable as the Google libraries see it: any non-empty value, even blank
    space, switches them to an emulator, so it must not be stripped away here."""
    return env.get(name) or None


@dataclass(frozen=True)
class Settings:
    """Everything the functions need to know about their environment.

    Each value has a working local default, so ``make dev`` runs with none set.
    """

    project_id: str = DEFAULT_PROJECT
    firestore_emulator_host: str | None = None
    auth_emulator_host: str | None = None
    storage_emulator_host: str | None = None
    # The bucket clients upload into (under ``{uid}/uploads/``); empty means the
    # project's default Firebase bucket, ``{project}.appspot.com`` (the emulator's too).
    uploads_bucket: str = ""
    openai_api_key: str | None = field(default=None, repr=False)
    openai_base_url: str | None = None
    anthropic_api_key: str | None = field(default=None, repr=False)
    anthropic_base_url: str | None = None
    gemini_api_key: str | None = field(default=None, repr=False)
    gemini_base_url: str | None = None
    # SPARK_MODEL, split: whose model, and the model's own name.
    provider: Provider = "openai"
    model: str = DEFAULT_MODEL
    # Set by Cloud Functions gen2 / Cloud Run; its presence means "production".
    cloud_service: str | None = None

    throttle_ms: int = 500
    keepalive_seconds: int = 15
    run_lease_seconds: int = 90
    # A model stream that sends nothing this long fails the run (not the connect timeout).
    provider_idle_seconds: int = 60
    # A watchdog checks a run this long after its lease lapses (DESIGN §7: within 60 s).
    watchdog_grace_seconds: int = 30
    # A client-executed tool not answered this long gets an error result.
    client_tool_timeout_seconds: int = 300
    # The live conversation document's budget: older messages roll over into archive/.
    live_doc_bytes: int = 256 * 1024
    # Per-user limits (OWASP API4 / LLM10): each answered with 429 and Retry-After.
    runs_per_user: int = 3
    daily_tokens_per_user: int = 2_000_000
    daily_uploads_per_user: int = 100
    # Resume streams (GET .../stream) one user may hold open on one instance.
    resume_streams_per_user: int = 10
    task_calls_per_step: int = 5
    tasks_queued_per_user: int = 20
    # Messages that may wait behind a live run in one conversation (``whenBusy: queue``),
    # and the bytes they may take together (as stored): at least one message of the
    # largest kind (32 KiB of text and ten attachments' references, under 64 KiB).
    queued_messages_per_conversation: int = 10
    queued_message_bytes: int = 128 * 1024
    # The history sent to the model is cut, oldest first, past this many characters.
    history_chars: int = 200_000
    # What one model call is shown of the attachments, newest first (DESIGN §9).
    attachment_images: int = 4
    attachment_image_bytes: int = 10 * 1024 * 1024
    attachment_text_chars: int = 60_000
    # Attachments read and made ready at once per process. One 40 MP image costs
    # 290–520 MB while it is normalised (measured) and an instance has 512 MiB and a
    # fraction of a CPU, so one at a time: more would add memory, not speed.
    attachment_decodes_at_once: int = 1
    max_steps: int = 10
    history_messages: int = 20
    tool_output_chars: int = 8000
    max_request_bytes: int = 1024 * 1024
    # Earlier versions kept of each lesson, for its owner to restore (the oldest go first).
    lesson_versions_kept: int = DEFAULT_LESSON_VERSIONS_KEPT
    offline_token_delay_ms: int = 15
    check_revoked: bool = False
    # Families (DESIGN §8): the web app's origin (invite links are {app_url}/join?token=…),
    # the members a family may hold, and the invite links a user may ask for and the
    # joins they may try in an hour (429 past either: tokens cannot be guessed by trying).
    app_url: str = "http://127.0.0.1:5173"
    family_max_members: int = 10
    family_invites_per_hour: int = 20
    family_joins_per_hour: int = 10

    # Cloud Tasks (DESIGN §6).
    tasks_per_user: int = 3
    task_max_attempts: int = 3
    task_retry_base_ms: int = 2000
    task_lease_seconds: int = 120
    tasks_queue: str = "spark-tasks"
    tasks_location: str = "europe-west2"
    tasks_url: str = "http://127.0.0.1:8081/"
    tasks_service_account: str | None = None
    tasks_emulator_host: str | None = None
    # Local only: accept task calls signed with this key instead of an OIDC token.
    tasks_local_key: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``env`` (default: ``os.environ``) and check them."""
        env = os.environ if env is None else env
        d = cls()  # the defaults are the fields' own, written once above
        provider, model = parse_model(_str(env, "SPARK_MODEL") or DEFAULT_MODEL)
        settings = cls(
            project_id=(
                _str(env, "GOOGLE_CLOUD_PROJECT") or _str(env, "GCLOUD_PROJECT") or DEFAULT_PROJECT
            ),
            firestore_emulator_host=_raw(env, "FIRESTORE_EMULATOR_HOST"),
            auth_emulator_host=_raw(env, "FIREBASE_AUTH_EMULATOR_HOST"),
            storage_emulator_host=_raw(env, "STORAGE_EMULATOR_HOST"),
            uploads_bucket=_str(env, "SPARK_UPLOADS_BUCKET") or d.uploads_bucket,
            openai_api_key=_str(env, "OPENAI_API_KEY"),
            openai_base_url=_str(env, "OPENAI_BASE_URL"),
            anthropic_api_key=_str(env, "ANTHROPIC_API_KEY"),
            anthropic_base_url=_str(env, "ANTHROPIC_BASE_URL"),
            gemini_api_key=_str(env, "GEMINI_API_KEY"),
            gemini_base_url=_str(env, "GEMINI_BASE_URL"),
            provider=provider,
            model=model,
            cloud_service=_str(env, "K_SERVICE"),
            throttle_ms=_int(env, "SPARK_THROTTLE_MS", d.throttle_ms, minimum=0),
            keepalive_seconds=_int(env, "SPARK_KEEPALIVE_SECONDS", d.keepalive_seconds),
            run_lease_seconds=_int(env, "SPARK_RUN_LEASE_SECONDS", d.run_lease_seconds),
            provider_idle_seconds=_int(env, "SPARK_PROVIDER_IDLE_SECONDS", d.provider_idle_seconds),
            watchdog_grace_seconds=_int(
                env, "SPARK_WATCHDOG_GRACE_SECONDS", d.watchdog_grace_seconds, minimum=0
            ),
            client_tool_timeout_seconds=_int(
                env, "SPARK_CLIENT_TOOL_TIMEOUT_SECONDS", d.client_tool_timeout_seconds
            ),
            live_doc_bytes=_int(env, "SPARK_LIVE_DOC_BYTES", d.live_doc_bytes, minimum=16_384),
            runs_per_user=_int(env, "SPARK_RUNS_PER_USER", d.runs_per_user),
            daily_tokens_per_user=_int(env, "SPARK_DAILY_TOKENS_PER_USER", d.daily_tokens_per_user),
            daily_uploads_per_user=_int(
                env, "SPARK_DAILY_UPLOADS_PER_USER", d.daily_uploads_per_user
            ),
            resume_streams_per_user=_int(
                env, "SPARK_RESUME_STREAMS_PER_USER", d.resume_streams_per_user
            ),
            task_calls_per_step=_int(env, "SPARK_TASK_CALLS_PER_STEP", d.task_calls_per_step),
            tasks_queued_per_user=_int(env, "SPARK_TASKS_QUEUED_PER_USER", d.tasks_queued_per_user),
            queued_messages_per_conversation=_int(
                env,
                "SPARK_QUEUED_MESSAGES_PER_CONVERSATION",
                d.queued_messages_per_conversation,
            ),
            queued_message_bytes=_int(
                env, "SPARK_QUEUED_MESSAGE_BYTES", d.queued_message_bytes, minimum=65_536
            ),
            history_chars=_int(env, "SPARK_HISTORY_CHARS", d.history_chars, minimum=1000),
            attachment_images=_int(env, "SPARK_ATTACHMENT_IMAGES", d.attachment_images, minimum=0),
            attachment_image_bytes=_int(
                env, "SPARK_ATTACHMENT_IMAGE_BYTES", d.attachment_image_bytes, minimum=0
            ),
            attachment_text_chars=_int(
                env, "SPARK_ATTACHMENT_TEXT_CHARS", d.attachment_text_chars, minimum=0
            ),
            attachment_decodes_at_once=_int(
                env, "SPARK_ATTACHMENT_DECODES_AT_ONCE", d.attachment_decodes_at_once
            ),
            max_steps=_int(env, "SPARK_MAX_STEPS", d.max_steps),
            history_messages=_int(env, "SPARK_HISTORY_MESSAGES", d.history_messages),
            tool_output_chars=_int(env, "SPARK_TOOL_OUTPUT_CHARS", d.tool_output_chars),
            lesson_versions_kept=_int(env, "SPARK_LESSON_VERSIONS_KEPT", d.lesson_versions_kept),
            offline_token_delay_ms=_int(
                env, "SPARK_OFFLINE_TOKEN_DELAY_MS", d.offline_token_delay_ms, minimum=0
            ),
            check_revoked=_bool(env, "SPARK_CHECK_REVOKED"),
            app_url=_str(env, "SPARK_APP_URL") or d.app_url,
            family_max_members=_int(
                env, "SPARK_FAMILY_MAX_MEMBERS", d.family_max_members, minimum=2
            ),
            family_invites_per_hour=_int(
                env, "SPARK_FAMILY_INVITES_PER_HOUR", d.family_invites_per_hour
            ),
            family_joins_per_hour=_int(env, "SPARK_FAMILY_JOINS_PER_HOUR", d.family_joins_per_hour),
            tasks_per_user=_int(env, "SPARK_TASKS_PER_USER", d.tasks_per_user),
            task_max_attempts=_int(env, "SPARK_TASK_MAX_ATTEMPTS", d.task_max_attempts),
            task_retry_base_ms=_int(
                env, "SPARK_TASK_RETRY_BASE_MS", d.task_retry_base_ms, minimum=0
            ),
            task_lease_seconds=_int(env, "SPARK_TASK_LEASE_SECONDS", d.task_lease_seconds),
            tasks_queue=_str(env, "CLOUD_TASKS_QUEUE") or d.tasks_queue,
            tasks_location=_str(env, "CLOUD_TASKS_LOCATION") or d.tasks_location,
            tasks_url=_str(env, "SPARK_TASKS_URL") or d.tasks_url,
            tasks_service_account=_str(env, "CLOUD_TASKS_SERVICE_ACCOUNT"),
            tasks_emulator_host=_str(env, "CLOUD_TASKS_EMULATOR_HOST"),
            tasks_local_key=_str(env, "SPARK_TASKS_LOCAL_KEY"),
        )
        settings.check()
        return settings

    @property
    def in_production(self) -> bool:
        return self.cloud_service is not None

    @property
    def bucket(self) -> str:
        """The uploads bucket: ``SPARK_UPLOADS_BUCKET``, or the project's default one."""
        return self.uploads_bucket or f"{self.project_id}.appspot.com"

    @property
    def provider_key(self) -> str | None:
        """The chosen provider's API key."""
        keys = {
            "openai": self.openai_api_key,
            "anthropic": self.anthropic_api_key,
            "google": self.gemini_api_key,
        }
        return keys[self.provider]

    @property
    def provider_base_url(self) -> str | None:
        """Where the chosen provider is reached, when not at its SDK's default."""
        urls = {
            "openai": self.openai_base_url,
            "anthropic": self.anthropic_base_url,
            "google": self.gemini_base_url,
        }
        return urls[self.provider]

    @property
    def offline_model(self) -> bool:
        """The chosen provider has neither a key nor a base URL: use the deterministic
        offline model (a local server may need no key, so a base URL alone will do)."""
        return self.provider_key is None and self.provider_base_url is None

    def check(self) -> None:
        """Refuse configurations that must never run.

        The Auth emulator accepts unsigned tokens, so honouring it in production would
        let anyone sign in as anyone; the Firestore emulator would silently lose data.
        """
        if not self.in_production:
            return
        if self.auth_emulator_host:
            raise ConfigurationError(
                "FIREBASE_AUTH_EMULATOR_HOST is set while running in production "
                f"(K_SERVICE={self.cloud_service}); refusing to accept unsigned tokens."
            )
        if self.firestore_emulator_host:
            raise ConfigurationError(
                "FIRESTORE_EMULATOR_HOST is set while running in production "
                f"(K_SERVICE={self.cloud_service}); refusing to start."
            )
        if self.storage_emulator_host:
            raise ConfigurationError(
                "STORAGE_EMULATOR_HOST is set while running in production "
                f"(K_SERVICE={self.cloud_service}); refusing to start."
            )
        if self.tasks_emulator_host:
            raise ConfigurationError(
                "CLOUD_TASKS_EMULATOR_HOST is set while running in production "
                f"(K_SERVICE={self.cloud_service}); refusing to start."
            )
        if self.tasks_local_key:
            raise ConfigurationError(
                "SPARK_TASKS_LOCAL_KEY (local task mode) is set while running in production "
                f"(K_SERVICE={self.cloud_service}); refusing to accept unsigned task calls."
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
