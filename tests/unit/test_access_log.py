"""Each request to the api is logged once, at INFO, as Cloud Logging's JSON: method,
path, status, duration and request id; never its body, its token or its query."""

from __future__ import annotations

import json
import logging

import pytest
from spark_http.logs import CloudLoggingFormatter

from shared.llm.scripted import ScriptedProvider, Step
from tests.unit.helpers import api_of, make_service, serving

URL = "/api/spark/agent/messages"
SECRET_TEXT = "my secret lesson idea"


def entries(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    formatter = CloudLoggingFormatter("demo-spark")
    return [
        json.loads(formatter.format(r)) for r in caplog.records if r.name == "spark_http.access"
    ]


async def test_each_request_is_logged_once_as_it_ends_without_body_or_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="spark_http.access")
    service = make_service(ScriptedProvider([Step.reply("Hello", " there!")]))
    headers = {"Authorization": "Bearer alice-token", "Accept": "text/event-stream"}
    async with serving(api_of(service)) as client:
        streamed = await client.post(URL, headers=headers, json={"text": SECRET_TEXT})
        refused = await client.post(URL, headers=headers, json={"text": " "})
        missing = await client.get("/api/spark/agent/nowhere?token=alice-token")
    assert (streamed.status_code, refused.status_code, missing.status_code) == (200, 400, 404)
    logged = entries(caplog)
    assert [(e["httpRequest"]["requestMethod"], e["httpRequest"]["status"]) for e in logged] == [  # type: ignore[index]
        ("POST", 200),
        ("POST", 400),
        ("GET", 404),
    ]
    for entry in logged:
        assert entry["severity"] == "INFO"
        assert str(entry["httpRequest"]["latency"]).endswith("s")  # type: ignore[index]
        assert str(entry["requestId"]).startswith("req_")
        line = json.dumps(entry)
        assert SECRET_TEXT not in line and "alice-token" not in line and "?" not in line
    assert logged[0]["httpRequest"]["requestUrl"] == URL  # type: ignore[index]
    # The request id in the log is the one the client was told.
    assert logged[1]["requestId"] == refused.json()["error"]["requestId"]
    assert logged[2]["message"].startswith("GET /api/spark/agent/nowhere 404 ")  # type: ignore[union-attr]
