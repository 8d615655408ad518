"""Cancelling a task before it starts (``POST .../tasks/{taskId}/cancel``)."""

from __future__ import annotations

import json

import pytest

from shared.errors import NotFound, TaskRunning
from shared.llm.scripted import ScriptedProvider
from shared.schemas.tasks import TASK_PAYLOAD, FollowUpTask, ReplyTask
from shared.tools.base import ToolRegistry
from tests.unit.helpers import ALICE, make_service, run_to_end
from tests.unit.test_tasks import Flaky, calls, fakes, results, stored, take, task_tool


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


async def test_a_running_task_is_409() -> None:
    service, f, _, granted = await four_tasks()
    payload = TASK_PAYLOAD.validate_json(granted[0].body)
    claimed = await service.scheduler.claim("alice", payload.task_id, payload.attempt)  # type: ignore[attr-defined]
    assert not isinstance(claimed, str)
    with pytest.raises(TaskRunning):
        await service.agent.cancel_task("alice", payload.task_id)  # type: ignore[attr-defined]
    ledger = await f.ledger.get("alice")
    assert ledger.tasks[payload.task_id].status == "running"
