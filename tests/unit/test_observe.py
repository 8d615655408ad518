"""Each process's telemetry (shared/observe): where it goes by the settings, the guard
that keeps what people said out of every exported span, and the metrics the egress
records for every provider call, read back with the in-memory reader."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint, NumberDataPoint
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from shared.clock import SystemClock
from shared.config import Settings
from shared.egress import screen as egress_screen
from shared.egress.gate import Egress
from shared.egress.provenance import InMemoryProvenanceStore
from shared.egress.screen import Screen
from shared.egress.words import Withheld
from shared.errors import ConfigurationError, ProviderUnavailable
from shared.families.preferences import Preferences
from shared.llm.base import ChatMessage, Finish, ModelRequest, TextDelta
from shared.llm.scripted import ScriptedProvider, Step
from shared.observe import setup
from shared.observe.content import ContentGuard, is_content
from shared.observe.setup import Telemetry
from shared.schemas.documents import Usage
from shared.store.memory import InMemorySettingsStore
from tests.unit.helpers import FreeBudget

SAID = "Please keep the diary code 4321 to yourself."


def settings(**env: str) -> Settings:
    return Settings.from_env(env)


def points(telemetry: Telemetry, name: str) -> list[Any]:
    """Every data point of the metric ``name`` read so far."""
    assert telemetry.readings is not None
    data = telemetry.readings.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found += list(metric.data.data_points)
    return found


# -- where it goes ------------------------------------------------------------------


def test_telemetry_is_off_unless_chosen_and_then_wraps_nothing() -> None:
    chosen = setup.build(settings())
    assert setup.destination(settings()) == "off"
    assert chosen.tracer_provider is None and chosen.meter_provider is None
    assert chosen.tracer is None


def test_a_deployment_chooses_cloud_trace_and_monitoring_without_making_them_here() -> None:
    # The GCP exporters reach Google as they are made: only the choice is checked.
    assert setup.destination(settings(SPARK_TELEMETRY="gcp")) == "gcp"
    assert setup.EXPORTERS["gcp"].__name__ == "_gcp"


def test_otlp_sends_to_the_local_viewer_and_needs_its_address() -> None:
    with pytest.raises(ConfigurationError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        setup.destination(settings(SPARK_TELEMETRY="otlp"))
    local = settings(SPARK_TELEMETRY="otlp", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:6006/")
    spans, metric_exporter = setup.EXPORTERS["otlp"](local)
    assert getattr(spans, "_endpoint", None) == "http://127.0.0.1:6006/v1/traces"
    assert metric_exporter is None  # the viewer takes traces only
    spans.shutdown()


def test_an_unknown_destination_refuses_to_start() -> None:
    with pytest.raises(ConfigurationError, match="SPARK_TELEMETRY must be one of off, otlp, gcp"):
        setup.destination(settings(SPARK_TELEMETRY="jaeger"))


def test_content_in_traces_is_refused_in_production() -> None:
    with pytest.raises(ConfigurationError, match="SPARK_TRACE_CONTENT is set while running in"):
        settings(K_SERVICE="spark-api", SPARK_TRACE_CONTENT="1")


# -- no content -----------------------------------------------------------------------


def _chatty_span(telemetry: Telemetry) -> None:
    """A span as a library's instrumentation might make it: content, and an exception."""
    assert telemetry.tracer is not None
    with (
        pytest.raises(ValueError, match="diary"),
        telemetry.tracer.start_as_current_span("chat gpt") as span,
    ):
        span.set_attribute("gen_ai.request.model", "gpt")
        span.set_attribute("gen_ai.input.messages", json.dumps([{"content": SAID}]))
        span.set_attribute("gen_ai.prompt.0.content", SAID)
        span.set_attribute("gen_ai.prompt.name", "lesson")
        span.add_event("gen_ai.user.message", {"content": SAID})
        raise ValueError(SAID)


def test_no_attribute_event_or_status_carries_what_was_said() -> None:
    telemetry = setup.in_memory()
    _chatty_span(telemetry)
    assert telemetry.spans is not None
    (span,) = telemetry.spans.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes == {"gen_ai.request.model": "gpt", "gen_ai.prompt.name": "lesson"}
    assert [e.name for e in span.events] == ["exception"]
    assert dict(span.events[0].attributes or {}).get("exception.type") == "ValueError"
    assert span.status.description == "ValueError"
    everything = json.dumps(
        [attributes, [dict(e.attributes or {}) for e in span.events], span.status.description]
    )
    assert "diary" not in everything and "4321" not in everything


def test_a_developer_may_see_content_locally() -> None:
    telemetry = setup.in_memory(settings(SPARK_TRACE_CONTENT="1"))
    _chatty_span(telemetry)
    assert telemetry.spans is not None
    (span,) = telemetry.spans.get_finished_spans()
    assert (span.attributes or {})["gen_ai.prompt.0.content"] == SAID


def test_the_guard_passes_a_span_without_content_as_it_is() -> None:
    exporter = InMemorySpanExporter()
    telemetry = setup.in_memory()
    assert telemetry.tracer is not None
    with telemetry.tracer.start_as_current_span("run") as span:
        span.set_status(Status(StatusCode.ERROR, "ProviderSilent"))
    assert telemetry.spans is not None
    (finished,) = telemetry.spans.get_finished_spans()
    ContentGuard(exporter).export([finished])
    assert exporter.get_finished_spans()[0] is finished
    assert not is_content("gen_ai.usage.input_tokens") and is_content("gen_ai.tool.call.result")


# -- metrics of the egress --------------------------------------------------------------


class Withholding(Screen):
    """A screen that withholds one member's words from every request."""

    def __init__(self) -> None:
        super().__init__(
            InMemoryProvenanceStore(), Preferences(InMemorySettingsStore(), SystemClock())
        )

    async def withheld(
        self, user_id: str, named: frozenset[str] | None = None
    ) -> egress_screen.Withholding:
        return egress_screen.Withholding(Withheld.of([SAID]))


def observed(provider: ScriptedProvider, screen: Screen | None = None) -> tuple[Egress, Telemetry]:
    telemetry = setup.in_memory()
    screen = screen or Screen(
        InMemoryProvenanceStore(), Preferences(InMemorySettingsStore(), SystemClock())
    )
    egress = Egress(
        provider, screen, FreeBudget(), tracer=telemetry.tracer, metrics=telemetry.metrics
    )
    return egress, telemetry


async def test_a_chat_call_records_its_tokens_per_model_and_kind_and_its_first_token() -> None:
    usage = Usage(input_tokens=17, output_tokens=4)
    provider = ScriptedProvider([Step([TextDelta("Hi"), Finish("stop", usage)])])
    egress, telemetry = observed(provider)
    request = ModelRequest(system="s", messages=[ChatMessage("user", SAID)])
    assert [e async for e in await egress.chat("alice", request)]
    tokens = points(telemetry, "gen_ai.client.token.usage")
    by_type = {p.attributes["gen_ai.token.type"]: p for p in tokens}
    assert (by_type["input"].sum, by_type["output"].sum) == (17, 4)
    assert dict(by_type["input"].attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "spark.egress.kind": "chat",
        "gen_ai.token.type": "input",
    }
    (first,) = points(telemetry, "gen_ai.client.operation.time_to_first_chunk")
    (duration,) = points(telemetry, "gen_ai.client.operation.duration")
    assert isinstance(first, HistogramDataPoint) and first.count == 1
    assert duration.count == 1 and duration.sum >= first.sum
    assert points(telemetry, "spark.opt_out.screens") == []


async def test_a_failed_task_call_is_timed_with_its_error_type_and_a_screen_is_counted() -> None:
    provider = ScriptedProvider(
        [Step([TextDelta("half")], error=ProviderUnavailable(f"failed on {SAID}"))]
    )
    egress, telemetry = observed(provider, Withholding())
    request = ModelRequest(system="Write.", messages=[ChatMessage("user", SAID)])
    with pytest.raises(ProviderUnavailable):
        await egress.complete("alice", request, "The draft")
    (duration,) = points(telemetry, "gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "ProviderUnavailable"
    assert duration.attributes["spark.egress.kind"] == "task"
    assert points(telemetry, "gen_ai.client.token.usage") == []  # none reported
    (screens,) = points(telemetry, "spark.opt_out.screens")
    assert isinstance(screens, NumberDataPoint) and screens.value == 1
    assert dict(screens.attributes) == {"spark.egress.kind": "task"}


def test_runs_tasks_and_limits_are_counted_by_their_labels() -> None:
    telemetry = setup.in_memory()
    telemetry.metrics.run_ended("completed", 2.5)
    telemetry.metrics.run_ended("failed")
    telemetry.metrics.run_ended("completed", 1.0)
    telemetry.metrics.task_delivered("tool", "done", 3.0, attempt=2)
    telemetry.metrics.limit_refused("runs_per_user")
    runs = {p.attributes["spark.run.ending"]: p.value for p in points(telemetry, "spark.runs")}
    assert runs == {"completed": 2, "failed": 1}
    (duration,) = points(telemetry, "spark.run.duration")
    assert (duration.count, duration.sum) == (2, 3.5)
    (attempts,) = points(telemetry, "spark.task.attempts")
    assert attempts.sum == 2 and dict(attempts.attributes) == {"spark.task.kind": "tool"}
    (refused,) = points(telemetry, "spark.limits.refused")
    assert dict(refused.attributes) == {"spark.limit": "runs_per_user"}


def test_with_telemetry_off_an_instance_imports_no_exporter_nor_the_metrics_sdk() -> None:
    from tests.unit.test_cold_start import modules_after_import_main

    imported = modules_after_import_main("api")
    assert "shared.observe.setup" in imported  # started, and chose nothing
    assert not {m for m in imported if m.startswith("opentelemetry.exporter")}
    assert "opentelemetry.sdk.metrics" not in imported
