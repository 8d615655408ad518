from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shared.config import SETTINGS, Settings
from shared.errors import ConfigurationError
from shared.policies import family_policy_of
from tools.docs import settings_table, shown

ROOT = Path(__file__).resolve().parents[2]


def test_settings_defaults_work_locally_with_the_offline_model() -> None:
    settings = Settings.from_env({})
    assert settings.offline_model and not settings.in_production
    assert (settings.throttle_ms, settings.max_steps, settings.history_messages) == (500, 10, 20)


def test_settings_refuse_auth_emulator_in_production() -> None:
    env = {
        "K_SERVICE": "api",
        "FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:9099",
        "OPENAI_API_KEY": "k",
    }
    with pytest.raises(ConfigurationError, match="unsigned tokens"):
        Settings.from_env(env)


def test_settings_reject_nonsense_numbers() -> None:
    with pytest.raises(ConfigurationError, match="SPARK_THROTTLE_MS"):
        Settings.from_env({"SPARK_THROTTLE_MS": "soon"})


def test_api_process_refuses_to_start_with_auth_emulator_in_production() -> None:
    env = {
        **os.environ,
        "K_SERVICE": "api",
        "FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:9099",
        "OPENAI_API_KEY": "k",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'functions'}",
    }
    result = subprocess.run(
        [sys.executable, "-c", "import main"],
        cwd=ROOT / "functions",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "refusing to accept unsigned tokens" in result.stderr


def production_env(**overrides: str | None) -> dict[str, str]:
    """A complete production environment; an override of ``None`` removes that variable."""
    env: dict[str, str | None] = {
        "K_SERVICE": "tasks",
        "GOOGLE_CLOUD_PROJECT": "spark-prod",
        "OPENAI_API_KEY": "k",
        "CLOUD_TASKS_SERVICE_ACCOUNT": "spark-tasks@demo-spark.iam.gserviceaccount.com",
        "SPARK_TASKS_URL": "https://europe-west2-demo-spark.cloudfunctions.net/tasks",
        "SPARK_APP_URL": "https://demo-spark.web.app",
        **overrides,
    }
    return {k: v for k, v in env.items() if v is not None}


@pytest.mark.parametrize("project", [None, "demo-spark", "demo-other"])
def test_settings_refuse_production_on_an_emulator_only_project(project: str | None) -> None:
    with pytest.raises(ConfigurationError, match="GOOGLE_CLOUD_PROJECT"):
        Settings.from_env(production_env(GOOGLE_CLOUD_PROJECT=project))


@pytest.mark.parametrize("url", [None, "http://demo-spark.web.app"])
def test_settings_refuse_production_without_an_https_app_url(url: str | None) -> None:
    with pytest.raises(ConfigurationError, match="SPARK_APP_URL"):
        Settings.from_env(production_env(SPARK_APP_URL=url))


def test_settings_read_the_family_limits_and_the_app_url() -> None:
    settings = Settings.from_env(
        {"SPARK_APP_URL": "https://spark.example/", "SPARK_FAMILY_MAX_MEMBERS": "4"}
    )
    assert family_policy_of(settings).app_url == "https://spark.example"  # links add /join
    assert (settings.family_max_members, settings.family_joins_per_hour) == (4, 10)
    with pytest.raises(ConfigurationError, match="SPARK_FAMILY_MAX_MEMBERS"):
        Settings.from_env({"SPARK_FAMILY_MAX_MEMBERS": "1"})


def test_settings_accept_a_complete_production_config() -> None:
    settings = Settings.from_env(production_env())
    assert settings.in_production and not settings.offline_model
    assert settings.tasks_service_account == "spark-tasks@demo-spark.iam.gserviceaccount.com"
    assert settings.tasks_url == "https://europe-west2-demo-spark.cloudfunctions.net/tasks"
    assert (settings.tasks_emulator_host, settings.tasks_local_key) == (None, None)


def test_settings_refuse_the_cloud_tasks_emulator_in_production() -> None:
    with pytest.raises(ConfigurationError, match="CLOUD_TASKS_EMULATOR_HOST"):
        Settings.from_env(production_env(CLOUD_TASKS_EMULATOR_HOST="127.0.0.1:8123"))


def test_settings_refuse_the_local_task_key_in_production() -> None:
    with pytest.raises(ConfigurationError, match="SPARK_TASKS_LOCAL_KEY"):
        Settings.from_env(production_env(SPARK_TASKS_LOCAL_KEY="local-secret"))


def test_settings_refuse_production_without_a_tasks_service_account() -> None:
    with pytest.raises(ConfigurationError, match="CLOUD_TASKS_SERVICE_ACCOUNT"):
        Settings.from_env(production_env(CLOUD_TASKS_SERVICE_ACCOUNT=None))
    with pytest.raises(ConfigurationError, match="CLOUD_TASKS_SERVICE_ACCOUNT"):
        Settings.from_env(production_env(CLOUD_TASKS_SERVICE_ACCOUNT="  "))


def test_settings_refuse_production_without_an_https_tasks_url() -> None:
    with pytest.raises(ConfigurationError, match="https SPARK_TASKS_URL"):
        Settings.from_env(production_env(SPARK_TASKS_URL="http://tasks.example.com/"))
    with pytest.raises(ConfigurationError, match="https SPARK_TASKS_URL"):
        Settings.from_env(production_env(SPARK_TASKS_URL=None))


def test_settings_allow_local_task_mode_outside_production() -> None:
    env = production_env(
        K_SERVICE=None, CLOUD_TASKS_EMULATOR_HOST="127.0.0.1:8123", SPARK_TASKS_LOCAL_KEY="s"
    )
    settings = Settings.from_env(env)
    assert not settings.in_production
    assert (settings.tasks_emulator_host, settings.tasks_local_key) == ("127.0.0.1:8123", "s")


@pytest.mark.parametrize("value", [" ", "\t", "  \n", "127.0.0.1:9099"])
def test_config_production_guard_sees_the_auth_emulator_as_firebase_admin_does(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firebase_admin import _auth_utils

    monkeypatch.setenv("FIREBASE_AUTH_EMULATOR_HOST", value)
    assert _auth_utils.is_emulated()  # firebase-admin would accept unsigned tokens...
    env = production_env(FIREBASE_AUTH_EMULATOR_HOST=value)
    with pytest.raises(ConfigurationError, match="FIREBASE_AUTH_EMULATOR_HOST"):
        Settings.from_env(env)  # ...so production refuses to start


@pytest.mark.parametrize(
    ("spark_model", "provider", "model"),
    [
        ("anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("google:gemini-2.5-flash", "google", "gemini-2.5-flash"),
        ("openai:gpt-4o-mini", "openai", "gpt-4o-mini"),
        ("gpt-4o-mini", "openai", "gpt-4o-mini"),
        # A fine-tune's name has colons of its own: still a bare OpenAI model.
        ("ft:gpt-4o-mini:acme::abc123", "openai", "ft:gpt-4o-mini:acme::abc123"),
    ],
)
def test_settings_read_the_provider_from_spark_model(
    spark_model: str, provider: str, model: str
) -> None:
    settings = Settings.from_env({"SPARK_MODEL": spark_model})
    assert (settings.provider, settings.model) == (provider, model)


def test_settings_use_the_chosen_providers_own_key_and_base_url() -> None:
    env = {
        "SPARK_MODEL": "anthropic:claude-sonnet-4-5",
        "OPENAI_API_KEY": "openai-key",
        "ANTHROPIC_API_KEY": "anthropic-key",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9000",
    }
    settings = Settings.from_env(env)
    assert settings.provider_key == "anthropic-key"
    assert settings.provider_base_url == "http://127.0.0.1:9000"
    assert not settings.offline_model
    google = Settings.from_env({"SPARK_MODEL": "google:g", "GEMINI_BASE_URL": "http://x"})
    assert google.provider_base_url == "http://x" and not google.offline_model


def test_settings_fall_back_to_the_offline_model_without_the_chosen_providers_key() -> None:
    # Another provider's key does not count: the chosen one has none.
    settings = Settings.from_env({"SPARK_MODEL": "google:gemini-2.5-flash", "OPENAI_API_KEY": "k"})
    assert settings.offline_model


@pytest.mark.parametrize(
    ("spark_model", "variable"),
    [
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("google:gemini-2.5-flash", "GEMINI_API_KEY"),
        ("gpt-4o-mini", "OPENAI_API_KEY"),
    ],
)
def test_settings_refuse_production_without_the_chosen_providers_key(
    spark_model: str, variable: str
) -> None:
    env = production_env(OPENAI_API_KEY=None, SPARK_MODEL=spark_model)
    # A base URL alone is fine locally (a fake needs no key) but not in production.
    env[variable.replace("API_KEY", "BASE_URL")] = "https://models.example.com"
    with pytest.raises(ConfigurationError, match=variable):
        Settings.from_env(env)
    assert Settings.from_env({**env, variable: "k"}).in_production


def test_settings_refuse_a_provider_prefix_without_a_model() -> None:
    with pytest.raises(ConfigurationError, match="SPARK_MODEL"):
        Settings.from_env({"SPARK_MODEL": "anthropic:"})


@pytest.mark.parametrize(
    ("spark_model", "adapter"),
    [
        ("anthropic:claude-sonnet-4-5", "AnthropicProvider"),
        ("google:gemini-2.5-flash", "GeminiProvider"),
        ("gpt-4o-mini", "OpenAIProvider"),
    ],
)
def test_wiring_builds_the_chosen_providers_adapter(spark_model: str, adapter: str) -> None:
    from shared.clock import SystemClock
    from shared.wiring import build_provider

    variable = {"anthropic": "ANTHROPIC_API_KEY", "google": "GEMINI_API_KEY"}.get(
        spark_model.partition(":")[0], "OPENAI_API_KEY"
    )
    settings = Settings.from_env({"SPARK_MODEL": spark_model, variable: "k"})
    provider = build_provider(settings, SystemClock())
    assert type(provider).__name__ == adapter
    assert provider.label == spark_model.partition(":")[2] or provider.label == spark_model
    offline = build_provider(Settings.from_env({"SPARK_MODEL": spark_model}), SystemClock())
    assert offline.provider == "offline"


def test_settings_read_how_many_attachments_are_made_ready_at_once() -> None:
    assert Settings().attachment_decodes_at_once == 1
    env = {"SPARK_ATTACHMENT_DECODES_AT_ONCE": "3"}
    assert Settings.from_env(env).attachment_decodes_at_once == 3
    with pytest.raises(ConfigurationError, match="SPARK_ATTACHMENT_DECODES_AT_ONCE"):
        Settings.from_env({"SPARK_ATTACHMENT_DECODES_AT_ONCE": "0"})


def test_the_configuration_page_shows_every_declared_setting_with_its_default() -> None:
    """docs/reference/configuration.md is generated from the declarations: one row a
    setting, its variable (and older names), default and minimum; no page keeps a table
    of its own."""
    table = settings_table()
    rows = table.splitlines()[2:]
    assert len(rows) == len(SETTINGS)
    for row, (declared, default) in zip(rows, SETTINGS.values(), strict=True):
        for name in declared.names:
            assert f"`{name}`" in row
        value = shown(declared, default)
        assert (value if value == "unset" else f"`{value}`") in row, row
        if declared.minimum is not None:
            assert f"| {declared.minimum} |" in row, row
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    assert "<!-- generated: settings -->" in page
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\| `SPARK_[A-Z_]+`", text, re.M), f"{path} keeps its own table"


def test_only_shared_config_reads_the_environment() -> None:
    readers = []
    for folder in ("shared", "functions"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "shared" / "config" / "__init__.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
                if name in ("environ", "getenv", "environb", "putenv"):
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")  # type: ignore[attr-defined]
    assert readers == []
