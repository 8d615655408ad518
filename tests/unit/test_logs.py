"""Logs as Cloud Logging reads them: JSON with severity, message, ids and the trace."""

from __future__ import annotations

import json
import logging

from spark_http.logs import CloudLoggingFormatter


def test_log_lines_are_cloud_logging_json_with_ids_and_trace() -> None:
    record = logging.LogRecord(
        "shared.agent.run.loop", logging.WARNING, "f", 1, "run %s failed", ("r1",), None
    )
    record.conversationId = "conv_1"
    record.trace = "abc123"
    entry = json.loads(CloudLoggingFormatter("demo-spark").format(record))
    assert entry["severity"] == "WARNING" and entry["message"] == "run r1 failed"
    assert entry["conversationId"] == "conv_1"
    assert entry["logging.googleapis.com/trace"] == "projects/demo-spark/traces/abc123"


def test_an_exception_is_logged_with_its_stack_in_one_entry() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, "f", 1, "failed", (), sys.exc_info())
    entry = json.loads(CloudLoggingFormatter().format(record))
    assert "ValueError: boom" in entry["stack_trace"]
