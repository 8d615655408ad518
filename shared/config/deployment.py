"""Where a process runs and what it reaches: the project, the emulators, the uploads
bucket, each provider's key and base URL, the chosen model and the prompts. These are
the first settings ``Settings`` declares; its other fields follow, in this order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.config.declaration import setting
from shared.config.providers import DEFAULT_MODEL, Provider, ProviderChoice
from shared.prompts import DEFAULT_DIR

DEFAULT_PROJECT = "demo-spark"


@dataclass(frozen=True)
class Deployment(ProviderChoice):
    """The settings that say where the functions run and whom they reach."""

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
