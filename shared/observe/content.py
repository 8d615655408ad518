"""No content leaves in a span: the guard every exporter sits behind.

Our own spans record no text (``shared/egress/spans.py``), but a span may be made by
code we do not own (a library's instrumentation following the GenAI conventions'
opt-in content attributes, the SDK recording an exception whose message quotes a
request), and a child's conversation must never reach a trace store because of it. So
every span passes this guard on its way out: any attribute or event that carries what
was said (a prompt, a reply, a message, a tool's arguments or result, an exception's
message or stack) is dropped, and an error's status keeps only its type.

An operator may see content in traces while developing (``SPARK_TRACE_CONTENT``);
``shared/observe/setup.py`` refuses it in production.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status
from opentelemetry.util.types import AttributeValue

CONTENT_ATTRIBUTES = frozenset(
    {
        # The GenAI conventions' opt-in content (semantic-conventions, gen_ai registry).
        "gen_ai.prompt",
        "gen_ai.completion",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.tool.definitions",
        # The SDK's record of an exception: its message may quote the request.
        "exception.message",
        "exception.stacktrace",
    }
)
# Older instrumentations index messages (``gen_ai.prompt.0.content``); ours, if any.
CONTENT_PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.", "spark.content.")
# Names that start like content but are not (a prompt template's name).
NOT_CONTENT = frozenset({"gen_ai.prompt.name"})
# Events whose whole point is a message (the conventions' older event form).
CONTENT_EVENTS = frozenset(
    {
        "gen_ai.content.prompt",
        "gen_ai.content.completion",
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
        "gen_ai.client.inference.operation.details",
    }
)


def is_content(key: str) -> bool:
    """Whether an attribute named ``key`` carries what someone said."""
    if key in NOT_CONTENT:
        return False
    return key in CONTENT_ATTRIBUTES or key.startswith(CONTENT_PREFIXES)


def _clean(attributes: Mapping[str, AttributeValue] | None) -> dict[str, AttributeValue]:
    return {k: v for k, v in (attributes or {}).items() if not is_content(k)}


def _needs_cleaning(span: ReadableSpan) -> bool:
    if any(is_content(k) for k in span.attributes or {}):
        return True
    if span.status.description and ": " in span.status.description:
        return True
    return any(
        e.name in CONTENT_EVENTS or any(is_content(k) for k in e.attributes or {})
        for e in span.events
    )


def cleaned(span: ReadableSpan) -> ReadableSpan:
    """``span`` without any content (itself when it has none: the usual case)."""
    if not _needs_cleaning(span):
        return span
    status = span.status
    if status.description and ": " in status.description:
        # The SDK writes an escaping exception as "Type: message": the type is kept.
        status = Status(status.status_code, status.description.split(": ", 1)[0])
    events = [
        Event(e.name, _clean(e.attributes), e.timestamp)
        for e in span.events
        if e.name not in CONTENT_EVENTS
    ]
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_clean(span.attributes),
        events=events,
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class ContentGuard(SpanExporter):
    """``exporter`` that receives every span without content (see the module)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._exporter.export([cleaned(s) for s in spans])

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)
