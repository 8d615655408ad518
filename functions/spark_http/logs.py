"""Structured logs that Cloud Logging understands: one JSON object per line with
``severity``, ``message``, the trace (when Cloud Run passes one) and the ids a log line
was given (``conversationId``, ``runId``, ``requestId``) as ``extra``.

Nothing here logs a token, a key or a message's text: callers log ids and codes, and an
SDK's own words only as a failure's ``detail``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

_IDS = ("conversationId", "runId", "requestId", "userId", "taskId")


class CloudLoggingFormatter(logging.Formatter):
    """``logging`` records as Cloud Logging's structured JSON."""

    def __init__(self, project: str | None = None) -> None:
        super().__init__()
        self._project = project

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
        }
        for name in _IDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        trace = getattr(record, "trace", None)
        if trace and self._project:
            entry["logging.googleapis.com/trace"] = f"projects/{self._project}/traces/{trace}"
        if record.exc_info:
            entry["stack_trace"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure(project: str | None = None, level: int = logging.INFO) -> None:
    """Send the process's logs to stderr as structured JSON (Cloud Logging's format),
    traces named in ``project``."""
    handler = logging.StreamHandler()
    handler.setFormatter(CloudLoggingFormatter(project))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
