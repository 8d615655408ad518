"""The span of each provider call, made where it leaves (``gate.py``), after the
OpenTelemetry GenAI conventions (``shared/telemetry.py`` names the attributes).

A span records who was asked, for which model, what it cost and how long the first
token took; never what was said. A failed call is marked with its error's type only:
an exception's message may quote the request. The same observations go to the
metrics (``shared/observe/metrics.py``) when the egress has them: tokens per model and
kind of call, duration and time to the first chunk.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, overload

from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode, Tracer

from shared import telemetry
from shared.llm.base import Finish, TextDelta, ToolCallRequest
from shared.llm.transcribe import Transcribed

if TYPE_CHECKING:
    from shared.observe.metrics import Metrics

E = TypeVar("E")
# What a stream sends many of (a reply's tokens, speech's audio): only the first counts.
_CHUNKS = (TextDelta, bytes)


@dataclass(frozen=True, slots=True)
class Call:
    """What a call's metrics are labelled with: never anything said."""

    operation: telemetry.Operation
    provider: str
    model: str
    kind: str


@dataclass(slots=True)
class _Seen:
    began: float
    first: float | None = None  # seconds to the first chunk
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None


def started(
    tracer: Tracer, operation: telemetry.Operation, provider: str, model: str, kind: str
) -> Span:
    """A client span for one call of ``operation`` to ``provider``'s ``model``."""
    return tracer.start_span(
        f"{operation} {model}",
        kind=SpanKind.CLIENT,
        attributes={
            telemetry.OPERATION: operation,
            telemetry.PROVIDER: provider,
            telemetry.REQUEST_MODEL: model,
            telemetry.KIND: kind,
        },
    )


@overload
def watched(
    events: AsyncGenerator[E, None],
    tracer: Tracer | None,
    metrics: Metrics | None,
    call: Call,
    withheld: bool | None = None,
) -> AsyncGenerator[E, None]: ...
@overload
def watched(
    events: AsyncIterator[E],
    tracer: Tracer | None,
    metrics: Metrics | None,
    call: Call,
    withheld: bool | None = None,
) -> AsyncIterator[E]: ...
def watched(
    events: AsyncIterator[E],
    tracer: Tracer | None,
    metrics: Metrics | None,
    call: Call,
    withheld: bool | None = None,
) -> AsyncIterator[E]:
    """``events`` under a span of ``call`` (with ``tracer``) and recorded in
    ``metrics``; ``events`` itself, unwrapped, with neither (observing off is free).
    ``withheld``: whether the screen withheld anything from the request."""
    if tracer is None and metrics is None:
        return events
    span: Span = INVALID_SPAN
    if tracer is not None:
        span = started(tracer, call.operation, call.provider, call.model, call.kind)
        if withheld is not None:
            span.set_attribute(telemetry.WITHHELD, withheld)
    return traced(events, span, call, metrics)


def _observe(span: Span, event: object, seen: _Seen) -> None:
    """Record what ``event`` tells of the call."""
    if seen.first is None and isinstance(event, TextDelta | ToolCallRequest | bytes):
        seen.first = time.perf_counter() - seen.began
        span.set_attribute(telemetry.TIME_TO_FIRST_TOKEN, seen.first * 1000)
    if isinstance(event, Finish):
        seen.input_tokens, seen.output_tokens = event.usage.input_tokens, event.usage.output_tokens
        seen.cached_input_tokens = event.usage.cached_input_tokens
        span.set_attribute(telemetry.FINISH_REASONS, [event.reason])
        span.set_attribute(telemetry.CACHED_INPUT_TOKENS, seen.cached_input_tokens)
    elif isinstance(event, Transcribed):
        seen.input_tokens, seen.output_tokens = event.usage.input_tokens, event.usage.output_tokens
    else:
        return
    span.set_attribute(telemetry.INPUT_TOKENS, seen.input_tokens)
    span.set_attribute(telemetry.OUTPUT_TOKENS, seen.output_tokens)


async def traced(
    events: AsyncIterator[E],
    span: Span,
    call: Call | None = None,
    metrics: Metrics | None = None,
) -> AsyncGenerator[E, None]:
    """``events`` as they come, ``span`` ended when they end (however they end), and
    the ``call`` recorded in ``metrics`` when given."""
    seen, error = _Seen(time.perf_counter()), None
    try:
        async for event in events:
            # A token after the first tells the span nothing: no work per token.
            if seen.first is None or type(event) not in _CHUNKS:
                _observe(span, event, seen)
            yield event
    except BaseException as exc:
        error = type(exc).__name__
        span.set_status(Status(StatusCode.ERROR, error))
        span.set_attribute("error.type", error)
        raise
    finally:
        span.end()
        if metrics is not None and call is not None:
            metrics.model_call(
                operation=call.operation,
                provider=call.provider,
                model=call.model,
                kind=call.kind,
                seconds=time.perf_counter() - seen.began,
                input_tokens=seen.input_tokens,
                output_tokens=seen.output_tokens,
                cached_input_tokens=seen.cached_input_tokens,
                first_chunk_seconds=seen.first,
                error=error,
            )
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


T = TypeVar("T")


async def judged(
    answer: Awaitable[T], tracer: Tracer | None, metrics: Metrics | None, call: Call
) -> T:
    """``answer`` (one call that does not stream: a moderator's verdict) awaited under a
    span of ``call`` and recorded in ``metrics``; awaited as it is with neither."""
    if tracer is None and metrics is None:
        return await answer
    span = (
        INVALID_SPAN
        if tracer is None
        else started(tracer, call.operation, call.provider, call.model, call.kind)
    )
    began, error = time.perf_counter(), None
    try:
        return await answer
    except BaseException as exc:
        error = type(exc).__name__
        span.set_status(Status(StatusCode.ERROR, error))
        span.set_attribute("error.type", error)
        raise
    finally:
        span.end()
        if metrics is not None:
            metrics.model_call(
                operation=call.operation,
                provider=call.provider,
                model=call.model,
                kind=call.kind,
                seconds=time.perf_counter() - began,
                input_tokens=None,
                output_tokens=None,
                first_chunk_seconds=None,
                error=error,
            )
