"""An OTLP/HTTP trace receiver on loopback, for the end-to-end trace test and the
tracing benchmark: each export the functions post to it is decoded and handed on."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

Take = Callable[[ExportTraceServiceRequest, int], None]
"""What is done with one export: the request, decoded, and its size as posted in bytes
(called on the server's own threads)."""


class OtlpReceiver:
    """Listens on a free loopback port (``port``) from its making until ``close``."""

    def __init__(self, take: Take) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                plain = body
                if self.headers.get("Content-Encoding") == "gzip":
                    plain = gzip.decompress(body)
                take(ExportTraceServiceRequest.FromString(plain), len(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
