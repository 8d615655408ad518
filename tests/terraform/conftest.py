"""terraform/ as python-hcl2 reads it, and a scope that evaluates its expressions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.terraform.hcl import Config, Scope

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "my-spark-project"


@pytest.fixture(scope="session")
def config() -> Config:
    return Config.load(ROOT / "terraform")


@pytest.fixture
def scope(config: Config) -> Scope:
    """Every variable at its default (the project, which has none, set)."""
    return config.scope(project_id=PROJECT)
