"""The span of each provider call, made where it leaves (``gate.py``), after the
OpenTelemetry GenAI conventions (``shared/telemetry.py`` names the attributes).

A span records who was asked, for which model, what it cost and how long the first
token took; never what was said. A failed call is marked with its error's type only:
an exception's message may quote the request.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from shared import telemetry
from shared.llm.base import Finish, TextDelta, ToolCallRequest
from shared.llm.transcribe import Transcribed

E = TypeVar("E")


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


def _observe(span: Span, event: object, began: float, first: bool) -> bool:
    """Record what ``event`` tells of the call; whether the first token is still to come."""
    if first and isinstance(event, TextDelta | ToolCallRequest | bytes):
        span.set_attribute(telemetry.TIME_TO_FIRST_TOKEN, (time.perf_counter() - began) * 1000)
        first = False
    if isinstance(event, Finish):
        span.set_attribute(telemetry.INPUT_TOKENS, event.usage.input_tokens)
        span.set_attribute(telemetry.OUTPUT_TOKENS, event.usage.output_tokens)
        span.set_attribute(telemetry.FINISH_REASONS, [event.reason])
    elif isinstance(event, Transcribed):
        span.set_attribute(telemetry.INPUT_TOKENS, event.usage.input_tokens)
        span.set_attribute(telemetry.OUTPUT_TOKENS, event.usage.output_tokens)
    return first


async def traced(events: AsyncIterator[E], span: Span) -> AsyncGenerator[E, None]:
    """``events`` as they come, ``span`` ended when they end (however they end)."""
    began, first = time.perf_counter(), True
    try:
        async for event in events:
            first = _observe(span, event, began, first)
            yield event
    except BaseException as exc:
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        span.set_attribute("error.type", type(exc).__name__)
        raise
    finally:
        span.end()
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
