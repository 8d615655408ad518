"""Each process's tracer and meter providers, chosen from its settings.

``SPARK_TELEMETRY`` says where traces and metrics go:

* ``off`` (the default): nowhere. No provider is set, the egress wraps no stream and
  the metrics' verbs are the API's no-ops: tracing off costs nothing.
* ``otlp``: spans over OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``make dev`` points
  it at its local trace viewer (Arize Phoenix: docs/observability.md says why). The
  viewer takes no metrics, so none are exported.
* ``gcp``: spans to Cloud Trace and metrics to Cloud Monitoring, with the project's
  own credentials (the functions' service accounts have the roles: terraform/iam.tf).

Tests build their own with ``in_memory()``: an in-memory span exporter and metric
reader, never the network.

Every span exporter sits behind the content guard (``content.py``) unless
``SPARK_TRACE_CONTENT`` is on, which ``Settings.check`` refuses in production.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from shared.config import Settings
from shared.errors import ConfigurationError
from shared.observe.content import ContentGuard
from shared.observe.metrics import Metrics

if TYPE_CHECKING:
    # The metrics SDK is imported only when a meter provider is made: an instance with
    # telemetry off (or traces only) does not pay for it at start.
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        InMemoryMetricReader,
        MetricExporter,
        MetricReader,
    )

Destination = Literal["off", "otlp", "gcp"]
DESTINATIONS: tuple[Destination, ...] = get_args(Destination)
# Cloud Monitoring accepts a point per series at most every 5 s; a minute keeps the
# writes (and their cost) low and is the resolution the alerts use.
METRICS_INTERVAL_MS = 60_000
SCOPE = "spark-agent"


def destination(settings: Settings) -> Destination:
    """Where ``settings`` send traces and metrics.

    Raises:
        ConfigurationError: ``SPARK_TELEMETRY`` names no destination we know, or
            ``otlp`` without ``OTEL_EXPORTER_OTLP_ENDPOINT``.
    """
    chosen = settings.telemetry.lower()
    for known in DESTINATIONS:
        if chosen == known:
            if known == "otlp" and not settings.otlp_endpoint:
                raise ConfigurationError(
                    "SPARK_TELEMETRY=otlp needs OTEL_EXPORTER_OTLP_ENDPOINT (the viewer's "
                    "OTLP/HTTP address, such as http://127.0.0.1:6006)."
                )
            return known
    raise ConfigurationError(
        f"SPARK_TELEMETRY must be one of {', '.join(DESTINATIONS)}, not {settings.telemetry!r}."
    )


Exporters = tuple[SpanExporter, "MetricExporter | None"]


def _otlp(settings: Settings) -> Exporters:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = f"{(settings.otlp_endpoint or '').rstrip('/')}/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint), None


def _gcp(settings: Settings) -> Exporters:  # pragma: no cover (the network: deployed only)
    from opentelemetry.exporter.cloud_monitoring import CloudMonitoringMetricsExporter
    from opentelemetry.exporter.cloud_trace import CloudTraceSpanExporter

    project = settings.project_id
    spans = CloudTraceSpanExporter(project_id=project)  # type: ignore[no-untyped-call]
    return spans, CloudMonitoringMetricsExporter(project_id=project)


EXPORTERS: dict[Destination, Callable[[Settings], Exporters]] = {"otlp": _otlp, "gcp": _gcp}
"""How each destination's exporters are made (imported only when chosen)."""


@dataclass
class Telemetry:
    """One process's providers and the instruments on them."""

    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None
    metrics: Metrics
    spans: InMemorySpanExporter | None = None  # in_memory() only
    readings: InMemoryMetricReader | None = None  # in_memory() only
    _installed: bool = field(default=False, repr=False)

    @functools.cached_property
    def tracer(self) -> Tracer | None:
        """The tracer the egress and our spans take, or ``None`` when nothing is traced
        (the egress then wraps no stream at all). Made once: the SDK makes a new one,
        at some cost, on each ``get_tracer``."""
        if self.tracer_provider is None:
            return None
        return self.tracer_provider.get_tracer(SCOPE)

    def install(self) -> Telemetry:
        """Make these the process's global providers (once per process: OpenTelemetry
        keeps the first), so that code using the API's tracer records into them."""
        if self.tracer_provider is not None:
            trace.set_tracer_provider(self.tracer_provider)
        if self.meter_provider is not None:
            otel_metrics.set_meter_provider(self.meter_provider)
        self._installed = True
        return self

    def shutdown(self) -> None:
        """Export what is pending and stop (an instance being shut down); once only,
        however often it is called."""
        tracers, meters = self.tracer_provider, self.meter_provider
        self.tracer_provider = self.meter_provider = None
        if tracers is not None:
            tracers.shutdown()
        if meters is not None:
            meters.shutdown()


def _resource(settings: Settings) -> Resource:
    service = f"spark-{settings.function_target or 'local'}"
    return Resource.create({"service.name": service, "service.namespace": "spark-agent"})


def build(
    settings: Settings,
    span_exporter: SpanExporter | None = None,
    metric_reader: MetricReader | None = None,
) -> Telemetry:
    """The providers ``settings`` choose, or those exporting to ``span_exporter`` and
    ``metric_reader`` when given (tests). Nothing is installed globally (``install``).

    Raises:
        ConfigurationError: as ``destination``.
    """
    chosen = destination(settings)
    processor: SpanProcessor | None = None
    reader = metric_reader
    if span_exporter is not None:
        processor = SimpleSpanProcessor(_guarded(span_exporter, settings))
    elif chosen != "off":
        spans, metric_exporter = EXPORTERS[chosen](settings)
        # Exported off the request's path, in batches, by the SDK's own thread: a span's
        # end only queues it. The SDK's defaults (``OTEL_BSP_*``: a batch every 5 s or
        # at 512 spans, 2048 queued at most) are kept: at a few spans a second per
        # stream a busy instance fills a batch long before the queue, and what export
        # costs is per span, not per batch (``bench/tracing.py`` prints it), so fewer
        # spans, not other batches, is what makes tracing cheap.
        processor = BatchSpanProcessor(_guarded(spans, settings))
        if metric_exporter is not None and reader is None:
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            reader = PeriodicExportingMetricReader(
                metric_exporter, export_interval_millis=METRICS_INTERVAL_MS
            )
    resource = _resource(settings)
    tracers = None
    if processor is not None:
        # Shut down by ``Telemetry.shutdown`` (the entry point's, at exit), not twice.
        tracers = TracerProvider(resource=resource, shutdown_on_exit=False)
        tracers.add_span_processor(processor)
    meters = None
    if reader is not None:
        from opentelemetry.sdk.metrics import MeterProvider

        meters = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    return Telemetry(tracers, meters, Metrics(meters) if meters else Metrics())


def _guarded(exporter: SpanExporter, settings: Settings) -> SpanExporter:
    # Settings.check refuses trace_content in production; here it is development.
    return exporter if settings.trace_content else ContentGuard(exporter)


def in_memory(settings: Settings | None = None) -> Telemetry:
    """Providers that keep every span and metric in memory, for tests: the finished
    spans in ``spans``, the metrics from ``readings.get_metrics_data()``."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    spans, readings = InMemorySpanExporter(), InMemoryMetricReader()
    built = build(settings or Settings.from_env({}), spans, readings)
    built.spans, built.readings = spans, readings
    return built


_process: Telemetry | None = None


def start(settings: Settings) -> Telemetry:
    """The process's telemetry, as ``settings`` choose, installed globally (the
    functions' entry point calls this once, before it wires the components).

    Raises:
        ConfigurationError: as ``destination``.
    """
    global _process
    _process = build(settings).install()
    return _process


def process_tracer() -> Tracer | None:
    """The tracer ``start`` installed, or ``None`` (nothing traced, or not started)."""
    return _process.tracer if _process is not None else None


def process_metrics() -> Metrics | None:
    """The instruments ``start`` installed, or ``None`` when no metric is exported."""
    if _process is None or _process.meter_provider is None:
        return None
    return _process.metrics
