"""Running one tool call, the same way wherever it runs: inside the stream (an inline
call, ``shared/agent/run/loop.py``) or on Cloud Tasks (a task call, ``shared/tasks/handler.py``).

Whatever the tool does (returns, refuses with ``ToolError``, fails unexpectedly, returns
more than the model may read) becomes a ``ToolOutcome``; only what the caller does with a
failure differs: an inline call reports it at once, a task call is retried first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.errors import SparkError, TaskCancelled, ToolError
from shared.llm.base import ToolCallRequest
from shared.observe import tracing
from shared.tools.base import (
    Ask,
    DocumentChange,
    ParsedCall,
    ToolContext,
    ToolRegistry,
    dump_output,
    error_output,
)
from shared.tools.descriptions import describe_failure, describe_output


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one call came to.

    Attributes:
        output_json: what the model reads (a result, or ``{"error": ...}``).
        error: our words for a failure, fit to show the user; ``None`` when it worked.
        change: the lesson the call created or changed.
        failure: the exception of a call that failed unexpectedly (not a ``ToolError``):
            for the caller's log, and a task call is retried.
        ask: the question a task tool puts to its user before it goes on.
    """

    output_json: str
    error: str | None = None
    change: DocumentChange | None = None
    failure: Exception | None = field(default=None, repr=False)
    ask: Ask | None = None
    # What the result shows, in words (``shared/tools/descriptions.py``).
    description: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def refused(message: str) -> ToolOutcome:
    """A call that did not run, or ran and failed, for the reason ``message`` gives the
    model (a ``ToolError``, invalid arguments, a limit)."""
    return ToolOutcome(error_output(message), error=message, description=describe_failure(message))


def unexpected(tool: str) -> str:
    """What the model hears of a tool that failed unexpectedly."""
    return f"The {tool} tool failed unexpectedly; try another way."


def safe_reason(exc: Exception) -> str:
    """What may be said of a failure outside the log (our words, never an SDK's)."""
    return exc.message if isinstance(exc, SparkError) else "an unexpected error"


async def execute(call: ParsedCall, context: ToolContext, output_chars: int) -> ToolOutcome:
    """Run ``call`` and keep at most ``output_chars`` characters of its result; never
    raises (except on cancellation: asyncio's, or ``TaskCancelled`` when a task's user
    cancelled it). Each call is a span (its model calls are its children)."""
    with tracing.tool(call.tool.name, call.call.id, call.tool.execution) as span:
        outcome = await _execute(call, context, output_chars)
        if not outcome.ok:
            tracing.tool_failed(span, outcome.failure)
        return outcome


async def execute_request(
    tools: ToolRegistry, request: ToolCallRequest, context: ToolContext, output_chars: int
) -> ToolOutcome:
    """``execute`` the model's ``request`` once ``tools`` has parsed it: a call that does
    not parse is refused (the model hears why, as for any refusal)."""
    try:
        parsed = tools.parse(request)
    except ToolError as exc:
        return refused(exc.message)
    return await execute(parsed, context, output_chars)


async def _execute(call: ParsedCall, context: ToolContext, output_chars: int) -> ToolOutcome:
    try:
        result = await call.run(context)
        output = dump_output(result.value, output_chars)
    except ToolError as exc:
        return refused(exc.message)
    except TaskCancelled:
        raise
    except Exception as exc:
        why = unexpected(call.call.name)
        return ToolOutcome(error_output(why), why, failure=exc, description=describe_failure(why))
    described = describe_output(call.tool.name, call.args, result.value)
    return ToolOutcome(output, change=result.change, ask=result.ask, description=described)
