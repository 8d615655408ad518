"""Every metric Spark AI Agent records, defined in one place, and the verbs the rest
of the code calls (``metrics.run_ended("completed")``).

The model calls' instruments are the OpenTelemetry GenAI conventions' own
(``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``,
``gen_ai.client.operation.time_to_first_chunk``), recorded by the egress for every
provider call; the rest are ours, named ``spark.*``. No attribute ever carries text a
person wrote: a model's name, a kind of call, an ending, a limit's name.

Until a meter provider is set (``shared/observe/setup.py``) the API's meter is a
no-op, so code may call these verbs unconditionally.
"""

from __future__ import annotations

from typing import Literal

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import Meter, MeterProvider

from shared import telemetry

Ending = Literal["completed", "stopped", "failed", "rate_limited", "interrupted"]
TokenType = Literal["input", "output"]

# The conventions' names (semantic-conventions, gen_ai metrics registry).
TOKEN_USAGE = "gen_ai.client.token.usage"
OPERATION_DURATION = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"
# Ours.
TOKENS = "spark.tokens"
RUNS = "spark.runs"
RUN_DURATION = "spark.run.duration"
TASK_DURATION = "spark.task.duration"
TASK_ATTEMPTS = "spark.task.attempts"
LIMITS_REFUSED = "spark.limits.refused"
SCREENS_APPLIED = "spark.opt_out.screens"
APP_CHECK = "spark.app_check.verdicts"

# The conventions' advised bucket boundaries, so Cloud Monitoring's percentiles of
# ours compare with any other GenAI client's.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
SECONDS_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)
LONG_SECONDS_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    """The instruments of one meter provider (the global one unless given)."""

    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter: Meter = (provider or otel_metrics.get_meter_provider()).get_meter("spark-agent")
        self._tokens = meter.create_histogram(
            TOKEN_USAGE,
            unit="{token}",
            description=(
                "Tokens used per model call, by type (input, output, and cached_input: "
                "the part of input read from the prompt cache)."
            ),
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS),
        )
        self._duration = meter.create_histogram(
            OPERATION_DURATION,
            unit="s",
            description="How long each model call took, to its last event.",
            explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS),
        )
        self._first = meter.create_histogram(
            TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time from a model call to its first token (or audio chunk).",
            explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS),
        )
        self._spent = meter.create_counter(
            TOKENS,
            unit="{token}",
            description="Tokens used, summed, by model and kind of call (the spend alert's).",
        )
        self._runs = meter.create_counter(RUNS, unit="{run}", description="Runs, by ending.")
        self._run_duration = meter.create_histogram(
            RUN_DURATION,
            unit="s",
            description="A run's time from its start to its ending.",
            explicit_bucket_boundaries_advisory=list(LONG_SECONDS_BUCKETS),
        )
        self._task_duration = meter.create_histogram(
            TASK_DURATION,
            unit="s",
            description="One delivery of a Cloud Task, by its kind and outcome.",
            explicit_bucket_boundaries_advisory=list(LONG_SECONDS_BUCKETS),
        )
        self._task_attempts = meter.create_histogram(
            TASK_ATTEMPTS,
            unit="{attempt}",
            description="Which attempt a task's delivery was (1 the first).",
            explicit_bucket_boundaries_advisory=[1, 2, 3, 5, 10, 20],
        )
        self._limits = meter.create_counter(
            LIMITS_REFUSED, unit="{request}", description="Requests refused by a limit, by kind."
        )
        self._screens = meter.create_counter(
            SCREENS_APPLIED,
            unit="{request}",
            description="Provider requests from which opted-out family text was withheld.",
        )
        self._app_check = meter.create_counter(
            APP_CHECK,
            unit="{request}",
            description="App Check verdicts on requests, by mode and outcome.",
        )

    # -- model calls (the egress) ------------------------------------------------------

    def model_call(
        self,
        *,
        operation: telemetry.Operation,
        provider: str,
        model: str,
        kind: str,
        seconds: float,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cached_input_tokens: int | None = None,
        first_chunk_seconds: float | None = None,
        error: str | None = None,
    ) -> None:
        """One provider call ended: its duration, tokens (those read from the prompt
        cache counted apart too, as ``cached_input``) and time to first chunk."""
        attributes: dict[str, str] = {
            telemetry.OPERATION: operation,
            telemetry.PROVIDER: provider,
            telemetry.REQUEST_MODEL: model,
            telemetry.KIND: kind,
        }
        if error is not None:
            self._duration.record(seconds, {**attributes, ERROR_TYPE: error})
        else:
            self._duration.record(seconds, attributes)
        if first_chunk_seconds is not None:
            self._first.record(first_chunk_seconds, attributes)
        counts = (
            ("input", input_tokens),
            ("output", output_tokens),
            ("cached_input", cached_input_tokens),
        )
        for kind_of_token, count in counts:
            if count is not None:
                self._tokens.record(count, {**attributes, TOKEN_TYPE: kind_of_token})
                if kind_of_token != "cached_input":  # a part of input: the alert's sum holds
                    self._spent.add(count, {**attributes, TOKEN_TYPE: kind_of_token})

    def screen_applied(self, kind: str) -> None:
        """A request of ``kind`` left with opted-out family text withheld."""
        self._screens.add(1, {telemetry.KIND: kind})

    # -- runs, tasks, limits -----------------------------------------------------------

    def run_ended(self, ending: Ending, seconds: float | None = None) -> None:
        """A run ended as ``ending`` after ``seconds`` (when known)."""
        self._runs.add(1, {"spark.run.ending": ending})
        if seconds is not None:
            self._run_duration.record(seconds, {"spark.run.ending": ending})

    def task_delivered(self, kind: str, outcome: str, seconds: float, attempt: int) -> None:
        """One delivery of a task of ``kind`` (``tool``, ``reply``, ``watchdog``...),
        its ``outcome`` (``done``, ``retry``, ``dead_letter``...) and which attempt it was."""
        attributes = {"spark.task.kind": kind, "spark.task.outcome": outcome}
        self._task_duration.record(seconds, attributes)
        self._task_attempts.record(attempt, {"spark.task.kind": kind})

    def limit_refused(self, limit: str) -> None:
        """A request refused by the limit named ``limit`` (``runs_per_user``,
        ``daily_tokens``, ``uploads``...)."""
        self._limits.add(1, {"spark.limit": limit})

    def app_check(self, mode: str, verdict: str) -> None:
        """An App Check verdict (``valid``, ``missing``, ``invalid``, ``replayed``) in
        ``mode`` (``monitor``, ``enforce``)."""
        self._app_check.add(1, {"spark.app_check.mode": mode, "spark.app_check.verdict": verdict})


metrics = Metrics()
"""The process's instruments, on the global meter provider (a no-op until set)."""
