"""Configuration, read from the environment in one place and injected everywhere else."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, get_args

from shared.errors import ConfigurationError
from shared.prompts import DEFAULT_DIR

DEFAULT_PROJECT = "demo-spark"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_TRANSCRIBE_MODEL = "gpt-4o-mini-transcribe"
# Earlier versions kept of each lesson (SPARK_LESSON_VERSIONS_KEPT); the stores' default.
DEFAULT_LESSON_VERSIONS_KEPT = 20

Provider = Literal["openai", "anthropic", "google"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)


# OpenAI's fine-tuned models are named ``ft:<base>:<org>::<id>``: a bare name with colons.
_FINE_TUNE = "ft"


def parse_model(spec: str) -> tuple[Provider, str]:
    """``SPARK_MODEL`` as (provider, model): ``anthropic:claude-sonnet-4-5`` names its
    provider; a bare name (``gpt-4o-mini``, or a fine-tune's ``ft:…``) is OpenAI's.

    Raises:
        ConfigurationError: a prefix that names no provider (``antropic:…``,
            ``mistral:large``), which would otherwise go to OpenAI as a model's name;
            or a provider with no model after it.
    """
    prefix, colon, model = spec.partition(":")
    if not colon:
        return "openai", spec
    named = prefix.strip().lower()
    for provider in PROVIDERS:
        if named == provider:
            if not model.strip():
                raise ConfigurationError(f"SPARK_MODEL={spec!r} names no model after the colon")
            return provider, model.strip()
    if named == _FINE_TUNE:
        return "openai", spec
    valid = ", ".join(f"{p}:" for p in PROVIDERS)
    raise ConfigurationError(
        f"SPARK_MODEL={spec!r} names no provider we know ({prefix!r}); write the model as "
        f"provider:model with one of {valid} (a bare name such as {DEFAULT_MODEL} is "
        "OpenAI's; a model whose own name has a colon is written openai:name)."
    )


AudioPurpose = Literal["live", "speech"]

DEFAULT_AUDIO_MODELS: dict[AudioPurpose, dict[Provider, str]] = {
    # Anthropic has no audio: a deployment on it names an OpenAI or Gemini model.
    "live": {"openai": "gpt-4o-mini-transcribe", "google": "gemini-live-2.5-flash-preview"},
    "speech": {"openai": "gpt-4o-mini-tts", "google": "gemini-2.5-flash-preview-tts"},
}


@dataclass(frozen=True, slots=True)
class AudioModel:
    """Whose model makes live audio or speech, and how its provider is reached."""

    provider: Provider
    model: str
    api_key: str | None = field(repr=False)
    base_url: str | None


Kind = Literal["int", "bool", "str", "raw"]


@dataclass(frozen=True, slots=True)
class Setting:
    """How one ``Settings`` field is read from the environment.

    ``names``: the variable, then older names read when it is unset. ``kind``: ``int``
    (a whole number, at least ``minimum``), ``bool``, ``str`` (stripped; blank is
    unset) or ``raw`` (any non-empty value, even blank space, as the Google libraries
    read an emulator's host: it must not be stripped away here). ``shown``: the
    default as the README states it, when that is not the value itself.
    """

    names: tuple[str, ...]
    meaning: str
    kind: Kind
    minimum: int | None = None
    shown: str | None = None


T = TypeVar("T")


def setting(
    name: str,
    default: T,
    meaning: str,
    *,
    minimum: int = 1,
    raw: bool = False,
    older: tuple[str, ...] = (),
    shown: str | None = None,
    secret: bool = False,
) -> T:
    """A ``Settings`` field read from the variable ``name``: its one declaration."""
    kind: Kind = (
        "bool"
        if isinstance(default, bool)
        else "int"
        if isinstance(default, int)
        else "raw"
        if raw
        else "str"
    )
    declared = Setting((name, *older), meaning, kind, minimum if kind == "int" else None, shown)
    return field(default=default, repr=not secret, metadata={"setting": declared})


def _read(env: Mapping[str, str], setting: Setting, default: Any) -> Any:
    """The value ``setting`` has in ``env``, or ``default`` when none of its names is set."""
    for name in setting.names:
        raw = env.get(name, "")
        text = raw if setting.kind == "raw" else raw.strip()
        if not text:
            continue
        if setting.kind == "int":
            return _int(name, text, setting.minimum or 0)
        if setting.kind == "bool":
            return _bool(name, text.lower())
        return text
    return default


def _int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, not {text!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum}, not {value}")
    return value


def _bool(name: str, text: str) -> bool:
    if text in ("0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise ConfigurationError(f"{name} must be true or false, not {text!r}")


@dataclass(frozen=True)
class Settings:
    """Everything the functions need to know about their environment: each field is
    declared once, with its variable, default, bounds and meaning (``setting``), and
    ``from_env`` reads them all from that declaration.

    Each value has a working local default, so ``make dev`` runs with none set.
    """

    project_id: str = setting(
        "GOOGLE_CLOUD_PROJECT",
        DEFAULT_PROJECT,
        "project id (token audience, Firestore project)",
        older=("GCLOUD_PROJECT",),
    )
    firestore_emulator_host: str | None = setting(
        "FIRESTORE_EMULATOR_HOST", None, "use the Firestore emulator", raw=True
    )
    auth_emulator_host: str | None = setting(
        "FIREBASE_AUTH_EMULATOR_HOST", None, "accept the Auth emulator's unsigned tokens", raw=True
    )
    storage_emulator_host: str | None = setting(
        "STORAGE_EMULATOR_HOST", None, "use the Cloud Storage emulator", raw=True
    )
    # Empty means the project's default Firebase bucket, ``{project}.appspot.com`` (the
    # emulator's too).
    uploads_bucket: str = setting(
        "SPARK_UPLOADS_BUCKET",
        "",
        "the bucket clients upload attachments into (under ``{uid}/uploads/``)",
        shown="{project}.appspot.com",
    )
    openai_api_key: str | None = setting("OPENAI_API_KEY", None, "the OpenAI key", secret=True)
    openai_base_url: str | None = setting(
        "OPENAI_BASE_URL", None, "where the OpenAI(-compatible) provider is reached"
    )
    anthropic_api_key: str | None = setting(
        "ANTHROPIC_API_KEY", None, "the Anthropic key", secret=True
    )
    anthropic_base_url: str | None = setting(
        "ANTHROPIC_BASE_URL", None, "where the Anthropic provider is reached"
    )
    gemini_api_key: str | None = setting("GEMINI_API_KEY", None, "the Gemini key", secret=True)
    gemini_base_url: str | None = setting(
        "GEMINI_BASE_URL", None, "where the Gemini provider is reached"
    )
    # SPARK_MODEL, split by ``from_env``: whose model (``provider``), and its own name.
    provider: Provider = "openai"
    model: str = setting(
        "SPARK_MODEL",
        DEFAULT_MODEL,
        "``provider:model``; a bare name is OpenAI's (``parse_model``)",
    )
    # Set by Cloud Functions gen2 / Cloud Run; its presence means "production".
    cloud_service: str | None = setting("K_SERVICE", None, "set by Cloud Run: production")
    # Set by Cloud Functions and by functions-framework's --target before it imports main.
    function_target: str | None = setting(
        "FUNCTION_TARGET", None, "the function this process serves (api or tasks)"
    )
    prompts_dir: str = setting(
        "SPARK_PROMPTS_DIR",
        "",
        "where the prompts are read from; empty: the ``prompts/`` packaged with the code",
        shown="prompts/",
    )

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
    daily_uploads_per_user: int = setting(
        "SPARK_DAILY_UPLOADS_PER_USER", 100, "upload sessions a day per user"
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
    # One 40 MP image costs 290–520 MB while it is normalised (measured) and an instance
    # has 512 MiB and a fraction of a CPU, so one at a time: more would add memory, not
    # speed.
    attachment_decodes_at_once: int = setting(
        "SPARK_ATTACHMENT_DECODES_AT_ONCE",
        1,
        "attachments read and made ready at once per process",
    )
    # A voice clip is decoded in a child process capped at 3 s of CPU and 128 MiB above
    # its ~40 MB start (docs/voice.md; measured: at most 23 MiB for any clip of the
    # hostile corpus): one at a time leaves the api's 512 MiB room to spare, and an
    # instance's fraction of a CPU would decode two no faster. The others wait, unread.
    voice_decodes_at_once: int = setting(
        "SPARK_VOICE_DECODES_AT_ONCE",
        1,
        "voice clips decoded at once per process (each in a child process); the others wait",
    )
    max_steps: int = setting("SPARK_MAX_STEPS", 10, "model calls in one reply")
    history_messages: int = setting(
        "SPARK_HISTORY_MESSAGES", 20, "messages of history sent to the model"
    )
    tool_output_chars: int = setting(
        "SPARK_TOOL_OUTPUT_CHARS", 8000, "characters of one tool's output the model is shown"
    )
    # Not read from the environment: the edge's own bound on a request body.
    max_request_bytes: int = 1024 * 1024
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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``env`` (default: ``os.environ``) and check them."""
        env = os.environ if env is None else env
        # SPARK_MODEL first: of several bad variables, it is the one reported.
        provider, model = parse_model(_read(env, *SETTINGS["model"]))
        values = {
            name: _read(env, s, default)
            for name, (s, default) in SETTINGS.items()
            if name != "model"
        }
        settings = cls(**values, provider=provider, model=model)
        for purpose in DEFAULT_AUDIO_MODELS:  # a misspelt audio model refuses to start
            settings.audio_model(purpose)
        settings.transcription  # noqa: B018 (refuses a bad SPARK_TRANSCRIBE_MODEL now)
        settings.check()
        return settings

    @property
    def in_production(self) -> bool:
        return self.cloud_service is not None

    @property
    def prompts(self) -> Path:
        """The prompts' folder: ``SPARK_PROMPTS_DIR``, or the one packaged with the code."""
        return Path(self.prompts_dir) if self.prompts_dir else DEFAULT_DIR

    @property
    def bucket(self) -> str:
        """The uploads bucket: ``SPARK_UPLOADS_BUCKET``, or the project's default one."""
        return self.uploads_bucket or f"{self.project_id}.appspot.com"

    @property
    def provider_key(self) -> str | None:
        """The chosen provider's API key."""
        return cast(str | None, getattr(self, _PROVIDER_FIELDS[self.provider][0]))

    @property
    def provider_base_url(self) -> str | None:
        """Where the chosen provider is reached, when not at its SDK's default."""
        return cast(str | None, getattr(self, _PROVIDER_FIELDS[self.provider][1]))

    def audio_model(self, purpose: AudioPurpose) -> AudioModel | None:
        """The provider and model of live audio (``live``) or spoken replies (``speech``):
        ``SPARK_LIVE_MODEL`` / ``SPARK_SPEECH_MODEL``, else SPARK_MODEL's provider's
        default; ``None`` when that provider has neither a key nor a base URL (offline),
        or is Anthropic's, which has no audio, and no other is named.

        Raises:
            ConfigurationError: the variable names no provider we know, or Anthropic.
        """
        spec = self.live_model if purpose == "live" else self.speech_model
        defaults = DEFAULT_AUDIO_MODELS[purpose]
        if spec:
            provider, model = parse_model(spec)
            if provider not in defaults:
                variable = "SPARK_LIVE_MODEL" if purpose == "live" else "SPARK_SPEECH_MODEL"
                raise ConfigurationError(
                    f"{variable}={spec!r}: {provider} has no audio; name an openai: or "
                    "google: model."
                )
        elif self.provider in defaults:
            provider, model = self.provider, defaults[self.provider]
        else:
            return None
        key_field, url_field = _PROVIDER_FIELDS[provider]
        key, url = getattr(self, key_field), getattr(self, url_field)
        if key is None and url is None:
            return None
        return AudioModel(provider, model, key, url)

    @property
    def offline_model(self) -> bool:
        """The chosen provider has neither a key nor a base URL: use the deterministic
        offline model (a local server may need no key, so a base URL alone will do)."""
        return self.provider_key is None and self.provider_base_url is None

    @property
    def transcription(self) -> tuple[Provider, str]:
        """Who transcribes voice clips, and with which model: ``SPARK_TRANSCRIBE_MODEL``,
        else Gemini's chat model on Gemini and ``gpt-4o-mini-transcribe`` otherwise (on
        Anthropic too, whose models take no audio: it needs the OpenAI key).

        Raises:
            ConfigurationError: it names no provider we know, or Anthropic.
        """
        if not self.transcribe_model:
            if self.provider == "google":
                return "google", self.model
            return "openai", DEFAULT_TRANSCRIBE_MODEL
        try:
            provider, model = parse_model(self.transcribe_model)
        except ConfigurationError as exc:
            raise ConfigurationError(
                str(exc).replace("SPARK_MODEL", "SPARK_TRANSCRIBE_MODEL")
            ) from None
        if provider == "anthropic":
            raise ConfigurationError(
                f"SPARK_TRANSCRIBE_MODEL={self.transcribe_model!r}: Anthropic's models take "
                "no audio; name an openai: or google: model to transcribe voice clips."
            )
        return provider, model

    @property
    def transcription_key(self) -> str | None:
        """The transcribing provider's API key."""
        return cast(str | None, getattr(self, _PROVIDER_FIELDS[self.transcription[0]][0]))

    @property
    def transcription_base_url(self) -> str | None:
        """Where the transcribing provider is reached, when not at its SDK's default."""
        return cast(str | None, getattr(self, _PROVIDER_FIELDS[self.transcription[0]][1]))

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


_PROVIDER_FIELDS: dict[Provider, tuple[str, str]] = {
    # (the field of its API key, of its base URL)
    "openai": ("openai_api_key", "openai_base_url"),
    "anthropic": ("anthropic_api_key", "anthropic_base_url"),
    "google": ("gemini_api_key", "gemini_base_url"),
}

_LOCAL_ONLY: tuple[tuple[str, str, str], ...] = (
    # (field, a note after its variable, what is refused), checked in this order.
    ("auth_emulator_host", "", "refusing to accept unsigned tokens"),
    ("firestore_emulator_host", "", "refusing to start"),
    ("storage_emulator_host", "", "refusing to start"),
    ("tasks_emulator_host", "", "refusing to start"),
    ("tasks_local_key", " (local task mode)", "refusing to accept unsigned task calls"),
)
"""The settings only a local run may have: each refuses a start in production."""

SETTINGS: dict[str, tuple[Setting, Any]] = {
    f.name: (f.metadata["setting"], f.default) for f in fields(Settings) if "setting" in f.metadata
}
"""Every field read from the environment, by name: its declaration and its default."""

KEY_VARIABLE: dict[Provider, str] = {
    p: SETTINGS[key][0].names[0] for p, (key, _) in _PROVIDER_FIELDS.items()
}
"""The variable holding each provider's API key (each SDK's own name for it)."""
