"""terraform/ as python-hcl2 reads it, and scopes that evaluate its expressions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.terraform.hcl import Config, Scope

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "my-spark-project"
# Values far from the defaults, so a literal that happens to equal a default is caught.
CUSTOM: dict[str, Any] = {
    "name_prefix": "spark-staging",
    "region": "us-east4",
    "model": "openai:gpt-4.1",
    "check_revoked": True,
    "limits": {"SPARK_MAX_STEPS": 4, "SPARK_THROTTLE_MS": 250},
    "queue": {
        "max_dispatches_per_second": 3,
        "max_concurrent_dispatches": 9,
        "max_attempts": 7,
        "min_backoff_seconds": 2,
        "max_backoff_seconds": 60,
        "max_retry_hours": 2,
    },
}


@pytest.fixture(scope="session")
def config() -> Config:
    return Config.load(ROOT / "terraform")


@pytest.fixture
def defaults(config: Config) -> Scope:
    """Every variable at its default (the project, which has none, set)."""
    return config.scope(project_id=PROJECT)


@pytest.fixture(params=["defaults", "custom"])
def scope(config: Config, request: pytest.FixtureRequest) -> Scope:
    """The defaults, then values far from them: the wiring must hold for both."""
    if request.param == "defaults":
        return config.scope(project_id=PROJECT)
    return config.scope(project_id=PROJECT, **CUSTOM)
