"""Traces of what Spark AI Agent asks of its providers, after OpenTelemetry's GenAI
semantic conventions (``gen_ai.*`` attributes).

Every provider call leaves through the egress (``shared/egress/gate.py``), so that is
where its span is made: one span per model call, transcription or reading aloud,
named ``{operation} {model}``, with the provider, the model, the tokens used, the
finish reason and the time to the first token. The adapters read the providers' raw
streams, so no official instrumentation could see these calls.

**No content is recorded**: no prompt, reply, message, family text or transcript in
any attribute. Children use this product; a trace names what was asked of whom and
what it cost, never what was said.

Until a tracer provider is set (``configure``), the API's tracer records nothing and
the egress does not even wrap a stream (``recording``): tracing off costs nothing on
the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

Operation = Literal[
    "chat", "text_completion", "transcription", "speech", "live_session", "moderation"
]

tracer = trace.get_tracer("spark-agent")

# The GenAI conventions' attribute names (semantic-conventions, gen_ai registry).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
# The part of the input tokens read from the provider's prompt cache.
CACHED_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
# Ours, where the conventions have none.
TIME_TO_FIRST_TOKEN = "spark.time_to_first_token_ms"
WITHHELD = "spark.opt_out.withheld"
KIND = "spark.egress.kind"


def recording() -> bool:
    """Whether spans are recorded at all (a tracer provider was configured)."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def configure(exporter: SpanExporter) -> TracerProvider:
    """Record spans into ``exporter`` from now on (once per process)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


class Recorder:
    """An in-memory exporter for tests: ``spans`` are the finished ones, oldest first."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()

    @property
    def spans(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()

    def clear(self) -> None:
        self.exporter.clear()
