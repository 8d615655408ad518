"""Run gcloud-tasks-emulator (in its own virtualenv) listening on 127.0.0.1 only.

Upstream binds ``[::]`` with SO_REUSEPORT; local stacks must stay on loopback and
must not share a port with a stale emulator, so the API thread is re-bound here.
Arguments are the emulator's own: ``start -p PORT -d QUEUE_PATH -r MAX_RETRIES``.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc  # type: ignore[import-not-found]
from gcloud_tasks_emulator import server  # type: ignore[import-not-found]
from gcloud_tasks_emulator.__main__ import main  # type: ignore[import-not-found]


def _run_on_loopback(self: Any) -> None:
    self._httpd = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)]
    )
    server.add_CloudTasksServicer_to_server(server.Greeter(self._state), self._httpd)
    if not self._httpd.add_insecure_port(f"127.0.0.1:{self._port}"):
        raise SystemExit(f"cannot listen on 127.0.0.1:{self._port}")
    server.logger.info("[API] Starting API server at 127.0.0.1:%s", self._port)
    self._httpd.start()


server.APIThread.run = _run_on_loopback

if __name__ == "__main__":
    main()
