"""Cancelling a task (``POST .../tasks/{taskId}/cancel``): before it starts, at once; while
its tool runs, at the tool's next step; once it has ended, 409 ``task_finished``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.errors import NotFound, TaskFinished
from shared.ids import task_id_for
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.tasks import TASK_PAYLOAD, FollowUpTask, ReplyTask
from shared.tools.base import ToolContext, ToolRegistry
from tests.unit.helpers import ALICE, api_of, make_service, run_to_end, serving
from tests.unit.test_tasks import (
    Flaky,
    SlowArgs,
    calls,
    fakes,
    results,
    stored,
    take,
    task_tool,
)


async def four_tasks() -> tuple[object, object, list[str], list[object]]:
    provider = ScriptedProvider([calls(("make_lesson", f"call_{n}")) for n in range(4)])
    f = fakes()
    service = make_service(provider, fakes=f, tools=ToolRegistry([task_tool(Flaky())]))
    conversations = [(await run_to_end(service, ALICE, f"lesson {n}"))[0] for n in range(4)]
    return service, f, conversations, take(f.queue)


async def test_a_queued_task_is_cancelled_with_a_result_and_a_follow_up() -> None:
    service, f, _, granted = await four_tasks()
    assert len(granted) == 3
    before = await f.ledger.get("alice")  # type: ignore[attr-defined]
    (queued,) = [r for r in before.tasks.values() if r.status == "queued"]
    fourth = queued.task_id

    resumed = await service.agent.cancel_task("alice", fourth)  # type: ignore[attr-defined]

    assert resumed.conversation_id == queued.conversation_id
    ledger = await f.ledger.get("alice")
    assert ledger.tasks[fourth].status == "cancelled"
    assert sum(r.status == "running" for r in ledger.tasks.values()) == 3
    section = await service.scheduler.sections.get("alice", fourth)  # type: ignore[attr-defined]
    assert section is not None and section.status == "cancelled"
    assert section.summary == "Cancelled by the user."
    after = await stored(service, queued.conversation_id)  # type: ignore[arg-type]
    assert results(after) == [
        (queued.tool_call_id, "error", json.dumps({"error": "Cancelled by the user."}))
    ]
    assert after.tasks is not None and after.tasks[fourth].status == "cancelled"
    follow = [TASK_PAYLOAD.validate_json(t.body) for t in take(f.queue)]
    assert any(isinstance(t, ReplyTask | FollowUpTask) for t in follow)


async def test_another_users_task_is_not_found() -> None:
    service, _, _, granted = await four_tasks()
    with pytest.raises(NotFound):
        await service.agent.cancel_task("bob", granted[0].name)  # type: ignore[attr-defined]
    with pytest.raises(NotFound):
        await service.agent.cancel_task("alice", "no-such-task")  # type: ignore[attr-defined]


class Stoppable:
    """A task tool with steps; between its first and second steps its user cancels it
    (through the agent, as the api of another process would)."""

    def __init__(self, via: str = "progress") -> None:
        self.via = via
        self.service: Any = None
        self.answers: list[str] = []
        self.reached: list[str] = []

    async def __call__(self, args: SlowArgs, context: ToolContext) -> dict[str, str]:
        await context.progress("Planning the lessons")
        self.reached.append("first step")
        task_id = task_id_for(context.conversation_id, context.tool_call_id)
        self.answers.append((await self.service.agent.cancel_task("alice", task_id)).status)
        if self.via == "progress":
            await context.progress("Writing lesson 1")
        else:
            assert context.meter is not None
            await context.meter.reserve(10, "task")  # before a model call
        self.reached.append("after the cancel")
        return {"lesson": "never"}


async def running_task_cancelled(via: str) -> tuple[Any, Any, Stoppable, list[object]]:
    tool = Stoppable(via)
    provider = ScriptedProvider(
        [
            *[calls(("make_lesson", f"call_{n}")) for n in range(2)],
            Step.reply("I stopped that lesson, as you asked."),
        ]
    )
    f = fakes()
    service = make_service(
        provider, fakes=f, tools=ToolRegistry([task_tool(tool)]), tasks_per_user=1
    )
    tool.service = service
    for n in range(2):
        await run_to_end(service, ALICE, f"lesson {n}")
    granted = take(f.queue)
    assert len(granted) == 1  # one slot: the second task waits
    await service.handler().handle(TASK_PAYLOAD.validate_json(granted[0].body))
    return service, f, tool, granted


async def test_a_running_task_stops_at_its_next_progress_step() -> None:
    service, f, tool, granted = await running_task_cancelled("progress")
    first = TASK_PAYLOAD.validate_json(granted[0].body)
    assert tool.answers == ["cancelling"]
    assert tool.reached == ["first step"]  # stopped at its next step
    ledger = await f.ledger.get("alice")
    assert ledger.tasks[first.task_id].status == "cancelled"
    # Its slot freed: the second task was granted.
    (second,) = [r for r in ledger.tasks.values() if r.task_id != first.task_id]
    assert second.status == "running"
    section = await service.scheduler.sections.get("alice", first.task_id)
    assert section is not None and section.status == "cancelled"
    assert section.summary == "Cancelled by the user."
    assert [u.text for u in section.updates] == ["Planning the lessons"]
    conversation = await stored(service, first.conversation_id)
    assert results(conversation)[0][1:] == (
        "error",
        json.dumps({"error": "Cancelled by the user."}),
    )
    assert conversation.tasks is not None
    assert conversation.tasks[first.task_id].status == "cancelled"
    # The model saw the result and followed up.
    assert conversation.messages[-1].text == "I stopped that lesson, as you asked."
    with pytest.raises(TaskFinished):
        await service.agent.cancel_task("alice", first.task_id)


async def test_a_running_task_stops_at_its_next_model_call() -> None:
    service, f, tool, granted = await running_task_cancelled("meter")
    first = TASK_PAYLOAD.validate_json(granted[0].body)
    assert tool.reached == ["first step"]
    ledger = await f.ledger.get("alice")
    assert ledger.tasks[first.task_id].status == "cancelled"
    section = await service.scheduler.sections.get("alice", first.task_id)
    assert section is not None and section.status == "cancelled"


async def test_an_attempt_granted_again_after_a_cancel_request_never_runs_its_tool() -> None:
    service, f, _, granted = await four_tasks()
    payload = TASK_PAYLOAD.validate_json(granted[0].body)
    claimed = await service.scheduler.claim("alice", payload.task_id, payload.attempt)  # type: ignore[attr-defined]
    assert not isinstance(claimed, str)
    done = await service.agent.cancel_task("alice", payload.task_id)  # type: ignore[attr-defined]
    assert done.status == "cancelling"
    ledger = await f.ledger.get("alice")  # type: ignore[attr-defined]
    record = ledger.tasks[payload.task_id]
    assert (record.status, record.cancel_requested) == ("running", True)
    # Its handler died: the next attempt is granted with the request, and stops at once.
    again = record.model_copy(update={"attempt": record.attempt + 1, "started": False})
    await f.ledger.mutate(  # type: ignore[attr-defined]
        "alice", lambda led: led.model_copy(update={"tasks": {**led.tasks, again.task_id: again}})
    )
    retry = payload.model_copy(update={"attempt": again.attempt})
    await service.handler().handle(retry)  # type: ignore[attr-defined]
    ledger = await f.ledger.get("alice")  # type: ignore[attr-defined]
    assert ledger.tasks[payload.task_id].status == "cancelled"
    after = await stored(service, payload.conversation_id)  # type: ignore[arg-type]
    assert results(after)[0][1:] == ("error", json.dumps({"error": "Cancelled by the user."}))


async def test_a_finished_task_is_409_task_finished_and_changes_nothing() -> None:
    service, f, _, granted = await four_tasks()
    handler = service.handler()  # type: ignore[attr-defined]
    payload = TASK_PAYLOAD.validate_json(granted[0].body)
    await handler.handle(payload)
    ledger = await f.ledger.get("alice")  # type: ignore[attr-defined]
    assert ledger.tasks[payload.task_id].status == "completed"
    section = await service.scheduler.sections.get("alice", payload.task_id)  # type: ignore[attr-defined]
    with pytest.raises(TaskFinished):
        await service.agent.cancel_task("alice", payload.task_id)  # type: ignore[attr-defined]
    assert await f.ledger.get("alice") == ledger  # type: ignore[attr-defined]
    assert await service.scheduler.sections.get("alice", payload.task_id) == section  # type: ignore[attr-defined]
    # Pruned from the ledger, its section still says it finished.
    await f.ledger.mutate(  # type: ignore[attr-defined]
        "alice",
        lambda led: led.model_copy(
            update={"tasks": {k: v for k, v in led.tasks.items() if k != payload.task_id}}
        ),
    )
    with pytest.raises(TaskFinished):
        await service.agent.cancel_task("alice", payload.task_id)  # type: ignore[attr-defined]


async def test_the_cancel_route_answers_200_202_404_and_409() -> None:
    service, f, _, granted = await four_tasks()
    ledger = await f.ledger.get("alice")  # type: ignore[attr-defined]
    (queued,) = [r for r in ledger.tasks.values() if r.status == "queued"]
    first = TASK_PAYLOAD.validate_json(granted[0].body)
    await service.scheduler.claim("alice", first.task_id, first.attempt)  # type: ignore[attr-defined]
    ledger = await f.ledger.get("alice")  # type: ignore[attr-defined]
    alice = {"Authorization": "Bearer alice-token"}

    def url(task_id: str) -> str:
        return f"/api/spark/agent/tasks/{task_id}/cancel"

    async with serving(api_of(service)) as client:  # type: ignore[arg-type]
        stranger = await client.post(
            url(queued.task_id), headers={"Authorization": "Bearer bob-token"}
        )
        assert stranger.status_code == 404 and stranger.json()["error"]["code"] == "not_found"
        unknown = await client.post(url("task_nothing"), headers=alice)
        assert unknown.status_code == 404
        nobody = await client.post(url(queued.task_id))
        assert nobody.status_code == 401
        assert (await f.ledger.get("alice")) == ledger  # type: ignore[attr-defined]

        at_once = await client.post(url(queued.task_id), headers=alice)
        assert at_once.status_code == 200
        assert at_once.json() == {
            "taskId": queued.task_id,
            "conversationId": queued.conversation_id,
            "status": "cancelled",
        }
        running = await client.post(url(first.task_id), headers=alice)
        assert running.status_code == 202
        assert running.json()["status"] == "cancelling"
        again = await client.post(url(queued.task_id), headers=alice)
        assert again.status_code == 409 and again.json()["error"]["code"] == "task_finished"
