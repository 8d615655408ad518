"""The raw task (``shared/queue/cloudtasks.py``) is the one the client library would
send, message for message: the handler's URL, its headers and body (signed for the
emulator), the OIDC token, the name and the time it is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.cloud import tasks_v2
from google.protobuf import timestamp_pb2

from shared.queue.base import SIGNATURE_HEADER, QueuedTask, sign
from shared.queue.cloudtasks import CloudTasksQueue

QUEUE = "projects/demo/locations/europe-west2/queues/spark"
URL = "https://tasks.example/handle"


def library_task(
    task: QueuedTask, service_account: str | None, headers: dict[str, str]
) -> tasks_v2.Task:
    """What the queue built with the client's proto-plus types before."""
    http = tasks_v2.HttpRequest(
        url=URL, http_method=tasks_v2.HttpMethod.POST, headers=headers, body=task.body
    )
    if service_account:
        http.oidc_token = tasks_v2.OidcToken(service_account_email=service_account, audience=URL)
    result = tasks_v2.Task(name=f"{QUEUE}/tasks/{task.name}", http_request=http)
    if task.schedule_at is not None:
        stamp = timestamp_pb2.Timestamp()
        stamp.FromDatetime(task.schedule_at)
        result.schedule_time = stamp
    return result


@pytest.mark.parametrize(
    "due",
    [
        None,
        datetime(2026, 11, 26, 12, 0, 30, 250_000, tzinfo=UTC),
        datetime(2026, 11, 26, 13, 0, tzinfo=timezone(timedelta(hours=1))),
    ],
)
@pytest.mark.parametrize("service_account", [None, "tasks@demo.iam.gserviceaccount.com"])
def test_a_task_is_the_librarys(due: datetime | None, service_account: str | None) -> None:
    task = QueuedTask(name="run-r1-watchdog", body=b'{"kind": "watchdog"}', schedule_at=due)
    queue = CloudTasksQueue(lambda: None, QUEUE, URL, service_account)
    headers = {"Content-Type": "application/json"}
    assert queue._request(task) == tasks_v2.Task.pb(library_task(task, service_account, headers))


def test_an_emulator_task_is_signed_for_the_time_it_is_due() -> None:
    due = datetime(2026, 11, 26, 12, 0, 30, tzinfo=UTC)
    task = QueuedTask(name="run-r1-watchdog", body=b"{}", schedule_at=due)
    queue = CloudTasksQueue(lambda: None, QUEUE, URL, None, local_key="local")
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign("local", b"{}", task.name, int(due.timestamp())),
    }
    assert queue._request(task) == tasks_v2.Task.pb(library_task(task, None, headers))
