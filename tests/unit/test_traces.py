"""Our own spans and the metrics the agent records (shared/observe/tracing.py and its
hooks): a run, its tool call and a task's delivery on fakes, read back from the
in-memory exporter and reader; a Cloud Task's trace header; a limit refused at the
edge. The end-to-end proof across processes is tests/e2e/test_traces.py."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.trace import get_current_span
from spark_http.responses import guarded
from starlette.requests import Request
from starlette.responses import Response

from shared.errors import RateLimited
from shared.llm.scripted import ScriptedProvider, Step
from shared.observe import propagation, setup, tracing
from shared.observe.setup import Telemetry
from shared.queue.base import QueuedTask
from shared.queue.cloudtasks import CloudTasksQueue
from shared.schemas.tasks import TASK_PAYLOAD
from shared.tools.base import ToolRegistry
from tests.unit.helpers import ALICE, make_service, run_to_end
from tests.unit.test_observe import points
from tests.unit.test_tasks import Flaky, calls, fakes, take, task_tool


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Telemetry:
    """This process's telemetry, in memory (as ``setup.start`` would install it)."""
    telemetry = setup.in_memory()
    monkeypatch.setattr(setup, "_process", telemetry)
    return telemetry


def spans(telemetry: Telemetry) -> dict[str, Any]:
    assert telemetry.spans is not None
    return {s.name: s for s in telemetry.spans.get_finished_spans()}


async def test_a_task_given_up_is_a_dead_letter_under_its_delivery_span(
    traced: Telemetry,
) -> None:
    provider = ScriptedProvider(
        [calls(("make_lesson", "call_1")), Step.reply("Sorry, that did not work.")]
    )
    f = fakes()
    service = make_service(
        provider, fakes=f, tools=ToolRegistry([task_tool(Flaky(failures=5))]), task_max_attempts=1
    )
    await run_to_end(service, ALICE, "lesson please")
    (task,) = take(f.queue)
    assert await service.handler().handle(TASK_PAYLOAD.validate_json(task.body)) == "done"

    found = spans(traced)
    delivery = found["process tool task"]
    assert dict(delivery.attributes or {}) | {"gen_ai.conversation.id": "?"} == {
        "messaging.system": "gcp_cloud_tasks",
        "messaging.operation.type": "process",
        "spark.task.kind": "tool",
        "spark.task.attempt": 1,
        "spark.task.outcome": "dead_letter",
        "gen_ai.conversation.id": "?",
    }
    tool = found["execute_tool make_lesson"]
    assert tool.parent is not None and tool.parent.span_id == delivery.context.span_id
    assert (tool.attributes or {})["error.type"] == "RuntimeError"
    follow_up = found["invoke_agent Spark AI Agent"]  # the last run's (names repeat)
    assert follow_up.parent is not None and follow_up.parent.span_id == delivery.context.span_id
    assert (follow_up.attributes or {})["spark.run.ending"] == "completed"

    (delivered,) = points(traced, "spark.task.duration")
    assert dict(delivered.attributes) == {
        "spark.task.kind": "tool",
        "spark.task.outcome": "dead_letter",
    }
    (runs,) = points(traced, "spark.runs")
    assert (dict(runs.attributes), runs.value) == ({"spark.run.ending": "completed"}, 2)


async def test_a_cloud_task_carries_the_trace_of_the_span_that_enqueued_it(
    traced: Telemetry,
) -> None:
    queue = CloudTasksQueue(lambda: None, "projects/p/locations/l/queues/spark", "http://t", None)
    task = QueuedTask("run-r1-watchdog", b"{}")
    sent: list[Any] = []

    async def create(request: Any, **_: object) -> None:
        sent.append(request)

    queue._create = create  # the gRPC method, as ``_method`` caches it
    with tracing.run("c1", "r1") as run:
        await queue.enqueue(task)
    headers = dict(sent[0].task.http_request.headers)
    carried = get_current_span(propagation.extract(headers)).get_span_context()
    enqueued = spans(traced)["send spark"]
    assert carried.span_id == enqueued.context.span_id != run.get_span_context().span_id
    assert carried.trace_id == run.get_span_context().trace_id
    assert headers["Content-Type"] == "application/json"


async def test_a_limit_refused_at_the_edge_is_counted_by_its_name(traced: Telemetry) -> None:
    async def refusing(request: Request) -> Response:
        raise RateLimited("Today's tokens are spent.", 60, limit="daily_tokens")

    scope = {"type": "http", "method": "POST", "path": "/x", "headers": [], "query_string": b""}
    response = await guarded(refusing, Request(scope))
    assert response.status_code == 429
    (refused,) = points(traced, "spark.limits.refused")
    assert dict(refused.attributes) == {"spark.limit": "daily_tokens"}
    request = spans(traced)["POST"]
    assert (request.attributes or {})["http.response.status_code"] == 429


async def test_commits_counted_for_a_run_are_timed_on_its_span_not_spans_of_their_own(
    traced: Telemetry,
) -> None:
    commits = tracing.Commits()
    with tracing.run("c1", "r1") as run:
        with tracing.commit("Firestore write"):
            pass  # the final write's: a span
        with tracing.counted(commits):
            for _ in range(3):
                with tracing.commit("Firestore write"):
                    pass
            with pytest.raises(RuntimeError), tracing.commit("Firestore write"):
                raise RuntimeError
        commits.record(run)

    finished = traced.spans.get_finished_spans() if traced.spans else ()
    assert [s.name for s in finished] == ["firestore commit", "invoke_agent Spark AI Agent"]
    attributes = dict(finished[1].attributes or {})
    assert attributes["spark.store.streaming_commits.count"] == 4
    assert attributes["spark.store.streaming_commits.failed"] == 1
    total = attributes["spark.store.streaming_commits.total_ms"]
    assert 0 <= attributes["spark.store.streaming_commits.max_ms"] <= total


async def test_with_tracing_off_no_attributes_are_built_and_no_commit_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(setup, "_process", None)  # as with SPARK_TELEMETRY=off
    commits = tracing.Commits()
    with tracing.counted(commits), tracing.commit("Firestore write") as span:
        assert not span.is_recording()
    assert commits.count == 0
    assert tracing.run("c1", "r1") is tracing.commit("Firestore write")  # one shared no-op
