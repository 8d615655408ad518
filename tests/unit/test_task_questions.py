"""A task asks its user a question (``waiting_on_user``) through an ``ask_user_question``
call of its own, and goes on in the same section once it is answered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.agent.waiting.questions import question_call_id
from shared.errors import RequestError, SparkError
from shared.llm.scripted import ScriptedProvider, Step
from shared.tools.base import Ask, ToolContext, ToolOutput, ToolRegistry
from tests.unit.helpers import ALICE, make_service, run_to_end
from tests.unit.test_tasks import (
    SlowArgs,
    calls,
    deliver_all,
    fakes,
    results,
    stored,
    task_tool,
)


class Asking:
    """A task tool that asks which page to review before it reviews it."""

    def __init__(self, options: tuple[str, ...] = ("Page 1", "Page 2")) -> None:
        self.options = options
        self.answers: list[str | None] = []

    async def __call__(self, args: SlowArgs, context: ToolContext) -> Any:
        self.answers.append(context.answer)
        await context.progress(f"Reading {args.topic}")
        if context.answer is None:
            ask = Ask("About the work", "Which page should I review?", self.options)
            return ToolOutput({"status": "needs_answer"}, ask=ask)
        return {"status": "reviewed", "answer": context.answer}


async def asked(options: tuple[str, ...] = ("Page 1", "Page 2")) -> tuple[Any, Any, Asking, str]:
    tool = Asking(options)
    provider = ScriptedProvider([calls(("make_lesson", "call_1")), Step.reply("Reviewed page 2.")])
    f = fakes()
    service = make_service(provider, fakes=f, tools=ToolRegistry([task_tool(tool)]))
    conversation_id, _ = await run_to_end(service, ALICE, "review my essay")
    await deliver_all(service, f.queue)
    return service, f, tool, conversation_id


async def test_a_task_waits_on_its_user_and_goes_on_in_the_same_section_once_answered() -> None:
    service, f, tool, conversation_id = await asked()
    assert tool.answers == [None]
    ledger = await f.ledger.get("alice")
    (record,) = ledger.tasks.values()
    assert record.status == "waiting_on_user"  # its slot is free while it waits
    section = await service.scheduler.sections.get("alice", record.task_id)
    assert section is not None and section.status == "waiting_on_user"
    assert section.question == "Which page should I review?"
    conversation = await stored(service, conversation_id)
    assert conversation.tasks is not None
    assert conversation.tasks[record.task_id].status == "waiting_on_user"
    question = conversation.messages[-1]
    assert question.status == "waiting"
    call = question.content[0].tool_call
    assert call is not None and call.id == question_call_id(record.tool_call_id)
    assert (call.name, call.execution, call.status, call.for_call) == (
        "ask_user_question",
        "question",
        "pending",
        record.tool_call_id,
    )
    assert json.loads(call.args_json)["questions"][0]["options"] == [
        {"label": "Page 1"},
        {"label": "Page 2"},
    ]
    assert results(conversation) == []  # the task's own call waits for its result

    with pytest.raises(RequestError):
        await service.agent.answer(
            "alice", conversation_id, call.id, {"0": "Page 9"}, background=True
        )
    assert (await f.ledger.get("alice")).tasks[record.task_id].status == "waiting_on_user"

    resumed = await service.agent.answer(
        "alice", conversation_id, call.id, {"0": "Page 2"}, background=True
    )
    assert resumed.status == "accepted"
    assert (await f.ledger.get("alice")).tasks[record.task_id].status == "running"
    await deliver_all(service, f.queue)

    assert tool.answers == [None, "Asked “Which page should I review?”, they answered: Page 2."]
    ledger = await f.ledger.get("alice")
    assert ledger.tasks[record.task_id].status == "completed"
    section = await service.scheduler.sections.get("alice", record.task_id)
    assert section is not None and section.status == "completed"
    assert section.question is None
    # One section throughout: the steps of both attempts, in order.
    assert [(u.text, u.attempt, u.step) for u in section.updates] == [
        ("Reading tides", 1, 1),
        ("Reading tides", 2, 2),
    ]
    after = await stored(service, conversation_id)
    outputs = [json.loads(o) for _, _, o in results(after)]
    assert outputs[-1]["status"] == "reviewed"
    assert after.messages[-1].text == "Reviewed page 2."  # the agent followed up the task
    assert [m.role for m in after.messages] == [
        "user",
        "assistant",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]


async def test_a_question_that_cannot_be_put_goes_to_the_model_as_before() -> None:
    service, f, _, conversation_id = await asked(options=("Yes",))
    ledger = await f.ledger.get("alice")
    (record,) = ledger.tasks.values()
    assert record.status == "completed"
    after = await stored(service, conversation_id)
    assert json.loads(results(after)[0][2]) == {"status": "needs_answer"}


async def test_a_waiting_task_is_cancelled_at_once_and_its_question_closed() -> None:
    service, f, _, conversation_id = await asked()
    (record,) = (await f.ledger.get("alice")).tasks.values()
    done = await service.agent.cancel_task("alice", record.task_id)
    assert done.status == "cancelled"
    assert (await f.ledger.get("alice")).tasks[record.task_id].status == "cancelled"
    section = await service.scheduler.sections.get("alice", record.task_id)
    assert section is not None and section.status == "cancelled"
    after = await stored(service, conversation_id)
    statuses = {call_id: status for call_id, status, _ in results(after)}
    assert statuses == {
        record.tool_call_id: "error",
        question_call_id(record.tool_call_id): "error",
    }
    await deliver_all(service, f.queue)  # the agent follows up the cancelled task
    assert (await stored(service, conversation_id)).messages[-1].text == "Reviewed page 2."


async def test_an_answer_racing_a_cancel_does_not_queue_the_cancelled_task_again() -> None:
    """The answer read the question still open, then the user cancelled the task (another
    request, another process) before the answer reached the ledger: the cancel stands,
    judged on the ledger as stored, not on the conversation the answer read first."""
    service, f, _, conversation_id = await asked()
    (record,) = (await f.ledger.get("alice")).tasks.values()
    read = f.store.get

    async def read_then_cancelled(user_id: str, conversation_id: str) -> Any:
        f.store.get = read  # type: ignore[method-assign]
        seen = await read(user_id, conversation_id)
        await service.agent.cancel_task("alice", record.task_id)
        return seen

    f.store.get = read_then_cancelled  # type: ignore[method-assign]
    question = question_call_id(record.tool_call_id)
    with pytest.raises(SparkError):
        await service.agent.answer(
            "alice", conversation_id, question, {"0": "Page 2"}, background=True
        )
    assert (await f.ledger.get("alice")).tasks[record.task_id].status == "cancelled"
    await deliver_all(service, f.queue)  # the agent follows up the cancelled task
    assert (await f.ledger.get("alice")).tasks[record.task_id].status == "cancelled"
    assert (await stored(service, conversation_id)).messages[-1].text == "Reviewed page 2."
