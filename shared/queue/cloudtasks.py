"""``TaskQueue`` on Cloud Tasks (the only module that imports ``google.cloud.tasks_v2``).

Tasks are HTTP tasks to the ``tasks`` function with an OIDC token for our service
account, which the function verifies in production. On the local emulator (which
sends no OIDC token) each body is also signed with the local key, so the function
can refuse calls that did not come through our queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import tasks_v2
from google.protobuf import timestamp_pb2

from shared.errors import QueueUnavailable
from shared.queue.base import SIGNATURE_HEADER, QueuedTask, sign

UNAVAILABLE = "Spark AI Agent could not schedule background work right now; please try again."


class CloudTasksQueue:
    """One Cloud Tasks queue whose tasks all call ``handler_url``."""

    def __init__(
        self,
        client: Callable[[], Any],
        queue_path: str,
        handler_url: str,
        service_account: str | None,
        local_key: str | None = None,
    ) -> None:
        self._make_client = client
        self._client: Any = None
        self._queue_path = queue_path
        self._handler_url = handler_url
        self._service_account = service_account
        self._local_key = local_key

    @classmethod
    def connect(
        cls,
        project: str,
        location: str,
        queue: str,
        handler_url: str,
        service_account: str | None,
        emulator_host: str | None = None,
        local_key: str | None = None,
    ) -> CloudTasksQueue:
        """A queue on Cloud Tasks, or on the emulator at ``emulator_host`` (plain gRPC).

        The client is made on first use: a gRPC asyncio channel belongs to the event
        loop it was made in, and the function's loop does not exist at import time.
        """

        def client() -> Any:
            if not emulator_host:
                return tasks_v2.CloudTasksAsyncClient()
            import grpc
            from google.cloud.tasks_v2.services.cloud_tasks.transports import (
                CloudTasksGrpcAsyncIOTransport,
            )

            channel = grpc.aio.insecure_channel(emulator_host)
            return tasks_v2.CloudTasksAsyncClient(
                transport=CloudTasksGrpcAsyncIOTransport(channel=channel)
            )

        path = tasks_v2.CloudTasksAsyncClient.queue_path(project, location, queue)
        return cls(client, path, handler_url, service_account, local_key)

    def _request(self, task: QueuedTask) -> tasks_v2.Task:
        headers = {"Content-Type": "application/json"}
        if self._local_key:
            due = task.schedule_at.timestamp() if task.schedule_at else time.time()
            headers[SIGNATURE_HEADER] = sign(self._local_key, task.body, task.name, int(due))
        http = tasks_v2.HttpRequest(
            url=self._handler_url,
            http_method=tasks_v2.HttpMethod.POST,
            headers=headers,
            body=task.body,
        )
        if self._service_account:
            http.oidc_token = tasks_v2.OidcToken(
                service_account_email=self._service_account, audience=self._handler_url
            )
        result = tasks_v2.Task(name=f"{self._queue_path}/tasks/{task.name}", http_request=http)
        if task.schedule_at is not None:
            result.schedule_time = _timestamp(task.schedule_at)
        return result

    async def enqueue(self, task: QueuedTask) -> None:
        if self._client is None:
            self._client = self._make_client()
        try:
            await self._client.create_task(parent=self._queue_path, task=self._request(task))
        except gexc.AlreadyExists:
            return  # the same work was queued already
        except gexc.GoogleAPICallError as exc:
            raise QueueUnavailable(UNAVAILABLE, detail=f"create_task: {exc.message}") from exc
        except gexc.RetryError as exc:
            raise QueueUnavailable(UNAVAILABLE, detail=f"create_task: {exc}") from exc


def _timestamp(moment: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp
