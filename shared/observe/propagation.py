"""A trace's context carried by a Cloud Task, so that its delivery on another
instance (a task tool, its model calls, the agent's follow-up, a watchdog) is a child
of the run that asked for it: one trace across processes.

The context travels as W3C Trace Context (``traceparent``, and ``tracestate`` when
there is one): as HTTP headers of the task's request where the queue lets us set
them, or as a field of its payload. ``inject`` writes the current span's context into
a carrier; ``extract`` reads it back into a ``Context`` the handler starts its span
in. Neither ever raises on a malformed or missing header: a task without a trace is
delivered all the same, as a trace of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from opentelemetry.context import Context
from opentelemetry.trace import Span, get_current_span, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
HEADERS = (TRACEPARENT, TRACESTATE)

# W3C Trace Context alone, whatever the process's global propagator: a task crosses
# only our own processes, and Cloud Run reads the same header.
_propagator = TraceContextTextMapPropagator()


def inject(carrier: MutableMapping[str, str], span: Span | None = None) -> MutableMapping[str, str]:
    """Write the context of ``span`` (default: the current one) into ``carrier`` (a
    task's headers or payload) and return it; nothing is written when there is no
    recording trace (tracing off)."""
    context = set_span_in_context(span) if span is not None else None
    _propagator.inject(carrier, context=context)
    return carrier


def carried(span: Span | None = None) -> dict[str, str]:
    """The headers that carry ``span``'s context (default: the current one): ``{}``
    when nothing is traced."""
    return dict(inject({}, span))


def extract(carrier: Mapping[str, str]) -> Context:
    """The context ``carrier`` (a delivery's headers or payload) carries, to start the
    handler's span in; an empty context when it carries none or a malformed one.
    Header names are matched whatever their case, as HTTP's are."""
    lowered = {k.lower(): v for k, v in carrier.items() if k.lower() in HEADERS}
    return _propagator.extract(lowered)


def current_trace_id() -> str | None:
    """The current trace's id as 32 hex digits (for a log line), or ``None``."""
    context = get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
