"""What a newcomer meets at start-up: a mistyped provider in ``SPARK_MODEL`` is refused,
naming the valid ones, rather than sent to OpenAI as a model name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.config import Settings
from shared.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("spark_model", ["antropic:claude-sonnet-4-5", "mistral:large", "Gemini:x"])
def test_an_unknown_provider_prefix_is_refused_naming_the_valid_ones(spark_model: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.from_env({"SPARK_MODEL": spark_model, "OPENAI_API_KEY": "k"})
    message = refused.value.message
    assert repr(spark_model.partition(":")[0]) in message
    for provider in ("openai:", "anthropic:", "google:"):
        assert provider in message


@pytest.mark.parametrize(
    ("spark_model", "provider", "model"),
    [
        ("gpt-4o-mini", "openai", "gpt-4o-mini"),  # a bare name stays OpenAI's
        ("ft:gpt-4o-mini:acme::abc123", "openai", "ft:gpt-4o-mini:acme::abc123"),
        ("openai:llama3.1:8b", "openai", "llama3.1:8b"),  # a compatible server's name
        ("ANTHROPIC:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
    ],
)
def test_known_prefixes_and_bare_names_still_choose_their_provider(
    spark_model: str, provider: str, model: str
) -> None:
    settings = Settings.from_env({"SPARK_MODEL": spark_model})
    assert (settings.provider, settings.model) == (provider, model)


def test_the_api_process_refuses_to_start_with_an_unknown_provider() -> None:
    env = {
        **os.environ,
        "SPARK_MODEL": "antropic:claude-sonnet-4-5",
        "ANTHROPIC_API_KEY": "k",
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
    assert "'antropic'" in result.stderr and "anthropic:" in result.stderr
