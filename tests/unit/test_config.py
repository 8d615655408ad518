from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.config import Settings
from shared.errors import ConfigurationError

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
