"""One tool call run the one way (``shared/tools/execute.py``); the loop's and the task
handler's tests cover what each makes of the outcome."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from shared.errors import StoreError, ToolError
from shared.llm.base import ToolCallRequest
from shared.tools.base import (
    DocumentChange,
    ParsedCall,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
)
from shared.tools.execute import execute, refused, safe_reason

CONTEXT = ToolContext("alice", "conv", "call-1")


class NoArgs(BaseModel):
    pass


def parsed(run: Callable[[NoArgs, ToolContext], Awaitable[Any]]) -> ParsedCall:
    tool = Tool("t", "A tool.", NoArgs, "Doing it", run)
    return ToolRegistry([tool]).parse(ToolCallRequest("call-1", "t", "{}"))


async def test_a_result_is_kept_with_the_lesson_it_changed() -> None:
    async def run(args: NoArgs, context: ToolContext) -> ToolOutput:
        return ToolOutput({"ok": True}, DocumentChange("doc-1", 3))

    outcome = await execute(parsed(run), CONTEXT, 100)

    assert outcome.ok and outcome.error is None and outcome.failure is None
    assert json.loads(outcome.output_json) == {"ok": True}
    assert outcome.change == DocumentChange("doc-1", 3)


async def test_a_long_result_is_cut_to_the_limit_with_a_note() -> None:
    async def run(args: NoArgs, context: ToolContext) -> str:
        return "x" * 50

    outcome = await execute(parsed(run), CONTEXT, 10)

    output = json.loads(outcome.output_json)
    assert outcome.ok and output["truncated"] is True and output["content"] == "x" * 10


async def test_a_tool_error_is_what_the_model_and_the_user_hear() -> None:
    async def run(args: NoArgs, context: ToolContext) -> str:
        raise ToolError("No lesson with that id.")

    outcome = await execute(parsed(run), CONTEXT, 100)

    assert outcome == refused("No lesson with that id.")
    assert not outcome.ok and outcome.failure is None
    assert json.loads(outcome.output_json) == {"error": "No lesson with that id."}


async def test_an_unexpected_failure_is_kept_for_the_caller_and_said_in_our_words() -> None:
    boom = RuntimeError("socket closed: secret detail")

    async def run(args: NoArgs, context: ToolContext) -> str:
        raise boom

    outcome = await execute(parsed(run), CONTEXT, 100)

    assert not outcome.ok and outcome.failure is boom
    assert outcome.error == "The t tool failed unexpectedly; try another way."
    assert "secret" not in outcome.output_json
    assert safe_reason(boom) == "an unexpected error"
    assert safe_reason(StoreError("The store is unavailable.")) == "The store is unavailable."
