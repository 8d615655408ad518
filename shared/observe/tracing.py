"""Our own spans: a request, a run, a tool call, a task's delivery and its enqueue, a
store commit. Each is made in the one place every path of its kind crosses, on the
process's tracer (``setup.start``); the model calls' spans are the egress's own
(``shared/egress/spans.py``).

They follow the OpenTelemetry conventions where some apply (GenAI for the agent and its
tools, messaging for Cloud Tasks, database for Firestore) and carry ids and counts
only: never a message, a prompt, a reply, a tool's arguments or what a family wrote.
A failure is recorded by its error's type alone (an exception's message may quote the
request).

With nothing traced (``SPARK_TELEMETRY=off``, or a process that never started its
telemetry), no span is made, no context set and no attribute built: one global read
and a check. With tracing on, attributes are built once per span, never per token.

Not every store commit is a span: a run's periodic streaming writes (one per throttle
interval, so most of a stream's commits) are counted and timed on the run's span
instead (``counted``, ``Commits``): as spans they would be most of what tracing a
stream costs (``bench/tracing.py`` prints the spans per stream-second by name), and
each tells nothing a count, a total and a longest do not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from opentelemetry.context import Context, attach, detach
from opentelemetry.trace import (
    INVALID_SPAN,
    Span,
    SpanKind,
    Status,
    StatusCode,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.util.types import AttributeValue

from shared import telemetry
from shared.observe import setup

# The conventions' names (semantic-conventions: gen_ai, messaging, db, http registries).
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION = "messaging.operation.type"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
DB_SYSTEM = "db.system.name"
DB_OPERATION = "db.operation.name"
ERROR_TYPE = "error.type"
# Ours.
RUN = "spark.run.id"
RUN_ENDING = "spark.run.ending"
TASK_KIND = "spark.task.kind"
TASK_OUTCOME = "spark.task.outcome"
TASK_ATTEMPT = "spark.task.attempt"
STORE_ATTEMPTS = "spark.store.attempts"
# A run's streaming writes, counted on its span (``Commits``).
STREAMING_COMMITS = "spark.store.streaming_commits.count"
STREAMING_FAILED = "spark.store.streaming_commits.failed"
STREAMING_TOTAL = "spark.store.streaming_commits.total_ms"
STREAMING_LONGEST = "spark.store.streaming_commits.max_ms"

AGENT = "Spark AI Agent"
QUEUE_SYSTEM = "gcp_cloud_tasks"

Attributes = Mapping[str, AttributeValue]

# What every helper returns with nothing traced (reusable: it holds no state).
_OFF: AbstractContextManager[Span] = nullcontext(INVALID_SPAN)


class Usage(Protocol):
    """Tokens counted (a run's ``Usage``)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cached_input_tokens(self) -> int: ...


def tracing() -> bool:
    """Whether this process records spans."""
    return setup.process_tracer() is not None


@contextmanager
def span(
    name: str,
    attributes: Attributes | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    context: Context | None = None,
) -> Iterator[Span]:
    """A span named ``name``, current inside the block (a child of ``context``'s span
    when given, else of the current one), ended when the block ends; a failure inside
    marks it with its error's type. ``INVALID_SPAN`` (records nothing) when nothing
    is traced."""
    tracer = setup.process_tracer()
    if tracer is None:
        yield INVALID_SPAN
        return
    current = tracer.start_span(name, context, kind, attributes)
    token = attach(set_span_in_context(current, context))
    try:
        yield current
    except BaseException as exc:
        failed(current, exc)
        raise
    finally:
        detach(token)
        current.end()


def started(
    name: str,
    attributes: Attributes | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    context: Context | None = None,
) -> Span:
    """A span the caller ends itself (a request whose stream outlives its handler), or
    ``INVALID_SPAN`` when nothing is traced; made current by ``current``."""
    tracer = setup.process_tracer()
    if tracer is None:
        return INVALID_SPAN
    return tracer.start_span(name, context, kind, attributes)


@contextmanager
def current(span: Span) -> Iterator[None]:
    """``span`` as the current span inside the block (not ended when it ends)."""
    if not span.is_recording():
        yield
        return
    token = attach(set_span_in_context(span))
    try:
        yield
    finally:
        detach(token)


def failed(span: Span, exc: BaseException) -> None:
    """Mark ``span`` as failed with ``exc``'s type only (never its message)."""
    kind = type(exc).__name__
    span.set_attribute(ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, kind))


def request(method: str, path: str, parent: Context | None = None) -> Span:
    """The span of one HTTP request (a server span, ended by ``answered``), named by its
    method until its route is known (``routed``); the path names ids only (never the
    query)."""
    if setup.process_tracer() is None:
        return INVALID_SPAN
    attributes = {"http.request.method": method, "url.path": path}
    return started(method, attributes, SpanKind.SERVER, parent)


def routed(method: str, route: str) -> None:
    """Name the current request's span by the route it matched (``POST /api/...``)."""
    current_span = get_current_span()
    current_span.update_name(f"{method} {route}")
    current_span.set_attribute("http.route", route)


def answered(span: Span, status: int) -> None:
    """End the request's ``span`` with its response's ``status`` (an error from 500)."""
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_attribute(ERROR_TYPE, str(status))
        span.set_status(Status(StatusCode.ERROR))
    span.end()


def run(conversation_id: str, run_id: str) -> AbstractContextManager[Span]:
    """The span of one run of the agent (the GenAI conventions' ``invoke_agent``)."""
    if setup.process_tracer() is None:
        return _OFF
    attributes = {
        telemetry.OPERATION: "invoke_agent",
        AGENT_NAME: AGENT,
        CONVERSATION: conversation_id,
        RUN: run_id,
    }
    return span(f"invoke_agent {AGENT}", attributes)


def run_ended(span: Span, ending: str, usage: Usage | None) -> None:
    """Record on a run's ``span`` how it ended and the tokens its model calls used."""
    attributes: dict[str, AttributeValue] = {RUN_ENDING: ending}
    if usage is not None:
        attributes[telemetry.INPUT_TOKENS] = usage.input_tokens
        attributes[telemetry.OUTPUT_TOKENS] = usage.output_tokens
        attributes[telemetry.CACHED_INPUT_TOKENS] = usage.cached_input_tokens
    span.set_attributes(attributes)


def tool(name: str, call_id: str, execution: str) -> AbstractContextManager[Span]:
    """The span of one tool call (the GenAI conventions' ``execute_tool``): its tool's
    name and the call's id, never its arguments or result."""
    if setup.process_tracer() is None:
        return _OFF
    attributes = {
        telemetry.OPERATION: "execute_tool",
        TOOL_NAME: name,
        TOOL_CALL: call_id,
        TOOL_TYPE: "function",
        "spark.tool.execution": execution,
    }
    return span(f"execute_tool {name}", attributes)


def tool_failed(span: Span, failure: Exception | None) -> None:
    """Mark a tool call's ``span`` failed: refused (``ToolError``) or ``failure``'s type."""
    kind = "ToolError" if failure is None else type(failure).__name__
    span.set_attribute(ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, kind))


def delivery(kind: str, attempt: int, conversation_id: str) -> AbstractContextManager[Span]:
    """The span of one delivery of a Cloud Task (the messaging conventions' ``process``;
    its outcome is set as it ends)."""
    if setup.process_tracer() is None:
        return _OFF
    attributes: dict[str, AttributeValue] = {
        MESSAGING_SYSTEM: QUEUE_SYSTEM,
        MESSAGING_OPERATION: "process",
        TASK_KIND: kind,
        TASK_ATTEMPT: attempt,
        CONVERSATION: conversation_id,
    }
    return span(f"process {kind} task", attributes, SpanKind.CONSUMER)


def enqueue(queue: str, name: str) -> AbstractContextManager[Span]:
    """The span of one Cloud Task's creation (the messaging conventions' ``send``): the
    task carries its context to its delivery (``propagation.inject``)."""
    if setup.process_tracer() is None:
        return _OFF
    attributes = {
        MESSAGING_SYSTEM: QUEUE_SYSTEM,
        MESSAGING_OPERATION: "send",
        MESSAGING_DESTINATION: queue,
        MESSAGE_ID: name,
    }
    return span(f"send {queue}", attributes, SpanKind.PRODUCER)


def commit(tried: str) -> AbstractContextManager[Span]:
    """The span of one store change, however many attempts its commit took (``tried``:
    ``"Firestore write"``, ``"Firestore transaction"``); inside ``counted``, no span:
    the change is counted and timed instead."""
    if setup.process_tracer() is None:
        return _OFF
    commits = _counting.get()
    if commits is not None:
        return commits.timed()
    attributes = {DB_SYSTEM: "firestore", DB_OPERATION: "commit", "spark.store.tried": tried}
    return span("firestore commit", attributes, SpanKind.CLIENT)


@dataclass(slots=True)
class Commits:
    """Store commits counted and timed for a span instead of each making its own (a
    run's streaming writes: the module says why); ``record`` puts them on the span."""

    count: int = 0
    failed: int = 0
    seconds: float = 0.0
    longest: float = 0.0

    @contextmanager
    def timed(self) -> Iterator[Span]:
        """One commit inside the block: counted, timed, and failed if it raises."""
        began = time.perf_counter()
        try:
            yield INVALID_SPAN
        except BaseException:
            self.failed += 1
            raise
        finally:
            took = time.perf_counter() - began
            self.count += 1
            self.seconds += took
            self.longest = max(self.longest, took)

    def record(self, span: Span) -> None:
        """Put the commits counted so far on ``span``: how many, how many failed, and
        their total and longest time in milliseconds."""
        if not self.count:
            return
        span.set_attributes(
            {
                STREAMING_COMMITS: self.count,
                STREAMING_FAILED: self.failed,
                STREAMING_TOTAL: round(self.seconds * 1000, 3),
                STREAMING_LONGEST: round(self.longest * 1000, 3),
            }
        )


_counting: ContextVar[Commits | None] = ContextVar("spark_counted_commits", default=None)


@contextmanager
def counted(commits: Commits | None) -> Iterator[None]:
    """Inside the block (in this task only), each store commit is counted and timed in
    ``commits`` instead of making a span; as outside when ``commits`` is ``None``."""
    if commits is None:
        yield
        return
    token = _counting.set(commits)
    try:
        yield
    finally:
        _counting.reset(token)
