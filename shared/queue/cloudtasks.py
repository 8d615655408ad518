"""``TaskQueue`` on Cloud Tasks (the only module that imports ``google.cloud.tasks_v2``).

Tasks are HTTP tasks to the ``tasks`` function with an OIDC token for our service
account, which the function verifies in production. On the local emulator (which
sends no OIDC token) each body is also signed with the local key, so the function
can refuse calls that did not come through our queue.

Each task carries the trace of the span that enqueued it, as a W3C ``traceparent``
header of its request (Cloud Tasks and the emulator both send a task's headers), so its
delivery is a child of the run that asked for it (``shared/observe/propagation.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.api_core import gapic_v1
from google.cloud import tasks_v2

from shared.errors import QueueUnavailable
from shared.observe import propagation, tracing
from shared.queue.base import SIGNATURE_HEADER, QueuedTask, sign

UNAVAILABLE = "Spark AI Agent could not schedule background work right now; please try again."
TIMEOUT_SECONDS = 20.0
"""A task's creation may take this long (the generated method's default)."""

# The C protobuf classes under the client's proto-plus wrappers.
_Task: Any = tasks_v2.Task.pb()
_CreateTaskRequest: Any = tasks_v2.CreateTaskRequest.pb()
_POST = int(tasks_v2.HttpMethod.POST)


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
        self._client: Any = None  # kept: its transport owns the channel
        self._create: Any = None  # the CreateTask method, on that channel
        self._metadata = (
            gapic_v1.routing_header.to_grpc_metadata((("parent", queue_path),)),  # type: ignore[no-untyped-call]
        )
        self._queue_path = queue_path
        self._queue = queue_path.rsplit("/", 1)[-1]
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

    def _request(self, task: QueuedTask) -> Any:
        """The raw ``Task`` message that calls the handler with ``task``."""
        headers = propagation.inject({"Content-Type": "application/json"})
        if self._local_key:
            due = task.schedule_at.timestamp() if task.schedule_at else time.time()
            headers[SIGNATURE_HEADER] = sign(self._local_key, task.body, task.name, int(due))
        result = _Task(name=f"{self._queue_path}/tasks/{task.name}")
        http = result.http_request
        http.url = self._handler_url
        http.http_method = _POST
        http.headers.update(headers)
        http.body = task.body
        if self._service_account:
            http.oidc_token.service_account_email = self._service_account
            http.oidc_token.audience = self._handler_url
        if task.schedule_at is not None:
            result.schedule_time.FromDatetime(task.schedule_at)  # an aware time as UTC
        return result

    def _method(self) -> Any:
        if self._create is None:
            self._client = self._make_client()
            channel: grpc.aio.Channel = self._client.transport.grpc_channel
            self._create = channel.unary_unary(
                "/google.cloud.tasks.v2.CloudTasks/CreateTask",
                request_serializer=_CreateTaskRequest.SerializeToString,
                response_deserializer=_Task.FromString,
            )
        return self._create

    async def enqueue(self, task: QueuedTask) -> None:
        with tracing.enqueue(self._queue, task.name):
            await self._create_task(task)

    async def _create_task(self, task: QueuedTask) -> None:
        request = _CreateTaskRequest(parent=self._queue_path, task=self._request(task))
        try:
            try:
                await self._method()(request, metadata=self._metadata, timeout=TIMEOUT_SECONDS)
            except grpc.aio.AioRpcError as rpc_error:
                raise gexc.from_grpc_error(rpc_error) from rpc_error  # type: ignore[no-untyped-call]
        except gexc.AlreadyExists:
            return  # the same work was queued already
        except gexc.GoogleAPICallError as exc:
            raise QueueUnavailable(UNAVAILABLE, detail=f"create_task: {exc.message}") from exc
