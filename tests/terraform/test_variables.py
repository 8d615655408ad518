"""Each variable's validation, evaluated as Terraform would: its default (and other good
values) pass, each bad value fails. The limits' minimums come from shared/config/."""

from __future__ import annotations

from typing import Any

import pytest

from tests.terraform.code import config_variables
from tests.terraform.conftest import PROJECT
from tests.terraform.hcl import Config, EvalError, Scope, convert, parse_type

GOOD: dict[str, list[Any]] = {
    "project_id": ["spark-prod-123456", "abcdef"],
    "region": ["us-central1", "asia-northeast1"],
    "firestore_location": ["eur3", "nam5", "us-east4"],
    "name_prefix": ["spk", "spark-staging"],
    "model": ["gpt-4.1", "openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "models/gemini-2.5"],
    "transcribe_model": ["", "whisper-1", "openai:gpt-4o-mini-transcribe", "google:gemini-2.5"],
    "openai_base_url": ["https://llm.example.com/v1", "https://example.com"],
    "anthropic_base_url": ["https://llm.example.com", "https://proxy.example.com/anthropic"],
    "gemini_base_url": ["https://llm.example.com", "https://proxy.example.com/gemini/"],
    "python_runtime": ["python312", "python313"],
    "source_archive": ["/tmp/functions.zip"],
    "limits": [{"SPARK_THROTTLE_MS": 0}, {"SPARK_LIVE_DOC_BYTES": 16384, "SPARK_MAX_STEPS": 1}],
    "api_scaling": [{"max_instances": 1, "concurrency": 1000, "memory": "1Gi"}],
    "tasks_scaling": [{"max_instances": 1000, "concurrency": 1, "memory": "256Mi"}],
    "queue": [{"max_attempts": 1, "min_backoff_seconds": 0.1, "max_backoff_seconds": 0.1}],
    "uploads_retention_days": [1, 3650],
    "labels": [{}, {"team": "learning", "cost-centre": "k12"}],
    "app_url": ["", "https://spark.example.com", "https://example.com/spark"],
    "live_model": ["", "openai:gpt-4o-transcribe", "google:gemini-live-2.5-flash-preview"],
    "speech_model": ["", "openai:gpt-4o-mini-tts", "google:gemini-2.5-flash-preview-tts"],
    "speech_voice": ["", "fable", "Kore"],
    "app_check": ["off", "monitor", "enforce"],
    "moderation": ["off", "dependents", "everyone"],
    "moderation_fail": ["closed", "open"],
    "helpline": ["Childline on 0800 1111", "Kids Help Phone: 1-800-668-6868"],
    "alert_email": ["", "ops@example.com"],
    "alerts": [{}, {"error_ratio": 1, "tokens_per_hour": 1, "first_token_p95_seconds": 0.5}],
}

BAD: dict[str, list[Any]] = {
    "project_id": ["My-Project", "short", "1project", "project-", "a" * 31],
    "region": ["Europe-West2", "europe_west2", "europe-west", ""],
    "firestore_location": ["eu", "EUR3", "europe-west2 "],
    "name_prefix": ["Spark", "sp", "spark-prefix-too-long", "spark-", "spark_api"],
    "model": ["", "gpt 4o", " gpt-4o", "a" * 201],
    "transcribe_model": ["anthropic:claude-x", "gpt 4o", " whisper-1", "google:"],
    "openai_base_url": ["http://api.openai.com/v1", "api.openai.com", "https://", ""],
    "anthropic_base_url": ["http://api.anthropic.com", "https://", ""],
    "gemini_base_url": ["generativelanguage.googleapis.com", "https://a b", ""],
    "python_runtime": ["python310", "python3.12", "python39"],
    "source_archive": ["../dist/functions.tar.gz", ""],
    "limits": [
        {"SPARK_MAX_STEPS": 0},
        {"SPARK_MAX_STEPS": 2.5},
        {"SPARK_THROTTLE_MS": -1},
        {"SPARK_LIVE_DOC_BYTES": 16383},
        {"SPARK_HISTORY_CHARS": 999},
    ],
    "api_scaling": [{"max_instances": 0}, {"concurrency": 1001}, {"memory": "512MB"}],
    "tasks_scaling": [{"max_instances": 1001}, {"concurrency": 0}, {"memory": "1G"}],
    "queue": [
        {"max_attempts": -1},
        {"max_attempts": 0},
        {"max_attempts": 101},
        {"max_dispatches_per_second": 0},
        {"max_concurrent_dispatches": 0},
        {"min_backoff_seconds": 10, "max_backoff_seconds": 5},
        {"min_backoff_seconds": 0},
        {"max_retry_hours": 0},
        {"max_retry_hours": 721},
    ],
    "uploads_retention_days": [0, 1.5, 3651],
    "labels": [{"App": "x"}, {"app": "Spark Agent"}, {"1app": "x"}],
    "app_url": [
        "http://spark.example.com",
        "https://spark.example.com/",
        "https://spark.example.com/?x=1",
        "spark.example.com",
        "https://",
    ],
    "live_model": ["anthropic:claude", "gpt-4o-transcribe", "openai: x"],
    "speech_model": ["anthropic:claude", "openai:", "tts 1"],
    "speech_voice": ["a voice", "x" * 41],
    "app_check": ["on", "Enforce", ""],
    "moderation": ["children", "Off", ""],
    "moderation_fail": ["shut", ""],
    "helpline": ["", "x" * 201],
    "alert_email": ["ops", "ops@example", "a b@example.com"],
    "alerts": [{"error_ratio": 0}, {"run_failure_ratio": 1.5}, {"tokens_per_hour": 0}],
}


def passes(config: Config, name: str, value: Any) -> bool:
    """Whether every validation of ``name`` holds for ``value``. A condition that errors
    fails the test instead: Terraform would show that error, not the validation's message."""
    body = config.blocks["variable"][name]
    scope = config.scope(**{"project_id": PROJECT, name: value})
    return all(scope.eval(v["condition"]) is True for v in body.get("validation", []))


def validated(config: Config) -> list[str]:
    return [n for n, body in config.blocks["variable"].items() if body.get("validation")]


def test_every_variable_but_the_booleans_has_a_validation_and_examples(config: Config) -> None:
    for name, body in config.blocks["variable"].items():
        assert body.get("description"), f"{name}: say what it is for"
        if parse_type(body.get("type")).kind == "bool":
            continue
        assert body.get("validation"), f"{name}: no validation"
        assert body["validation"][0].get("error_message"), name
    assert set(validated(config)) == set(GOOD) == set(BAD)


def test_every_default_passes_its_validation(config: Config, scope: Scope) -> None:
    for name in validated(config):
        if name != "project_id":
            assert passes(config, name, scope.variables[name]), name


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, vs in GOOD.items() for v in vs])
def test_validation_accepts(config: Config, name: str, value: Any) -> None:
    assert passes(config, name, value)


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, vs in BAD.items() for v in vs])
def test_validation_refuses(config: Config, name: str, value: Any) -> None:
    assert not passes(config, name, value)


def test_limit_minimums_are_the_codes_own(config: Config) -> None:
    """Each limit accepts the least value shared/config/ accepts, and refuses one less."""
    limits = {v.name: v for v in config_variables().values() if v.kind == "int"}
    names = parse_type(config.blocks["variable"]["limits"]["type"]).element
    assert names
    for name in names:
        minimum = limits[name].minimum
        assert minimum is not None
        assert passes(config, "limits", {name: minimum}), name
        assert not passes(config, "limits", {name: minimum - 1}), name


def test_a_limit_the_type_does_not_know_is_refused(config: Config) -> None:
    kind = parse_type(config.blocks["variable"]["limits"]["type"])
    with pytest.raises(EvalError):
        convert(kind, {"SPARK_MAX_STEP": 5})  # a typo is a type error, not a new variable
