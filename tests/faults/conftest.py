"""The fault suite: the end-to-end stack (emulators, both functions, the fake model)
with faults injected, audited after each scenario, and the totals printed at the end."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.e2e.conftest import (  # noqa: F401 (fixtures)
    _audited,
    alice,
    bucket,
    db,
    emulators,
    fake_openai,
    functions,
    second_api,
)

TOTALS: Counter[str] = Counter()
MAX_DOCUMENT_BYTES = 1024 * 1024


def audit(document: dict[str, Any] | None, sent: list[str], streamed: dict[str, str]) -> None:
    """Count what must never happen in a settled conversation: a user message lost, an
    assistant's text lost or doubled, a run left streaming, a tool call without exactly
    one result, a document over 1 MiB."""
    from shared.store.patch import DOCUMENT_OVERHEAD, field_size

    TOTALS["conversations audited"] += 1
    if document is None:
        TOTALS["lost user messages"] += len(sent)
        return
    messages = document.get("messages", [])
    texts = [m["content"][0]["text"] for m in messages if m["role"] == "user" and m["content"]]
    TOTALS["lost user messages"] += sum(1 for text in sent if text not in texts)
    if "activeRun" in document:
        TOTALS["runs left streaming"] += 1
    for message_id, text in streamed.items():
        stored = next((m for m in messages if m["id"] == message_id), None)
        body = "".join(p.get("text", "") for p in (stored or {}).get("content", []))
        if stored is None or not body.startswith(text):
            TOTALS["lost or doubled assistant text"] += 1
    calls = [p["toolCall"]["id"] for m in messages for p in m["content"] if "toolCall" in p]
    results = Counter(
        p["toolResult"]["toolCallId"] for m in messages for p in m["content"] if "toolResult" in p
    )
    TOTALS["tool calls without exactly one result"] += sum(1 for c in calls if results[c] != 1)
    size = DOCUMENT_OVERHEAD + sum(field_size(k, v) for k, v in document.items())
    if size > MAX_DOCUMENT_BYTES:
        TOTALS["documents over 1 MiB"] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TOTALS:
        return
    terminalreporter.section("fault suite")
    for name in (
        "conversations audited",
        "lost user messages",
        "lost or doubled assistant text",
        "runs left streaming",
        "tool calls without exactly one result",
        "documents over 1 MiB",
    ):
        terminalreporter.write_line(f"{name}: {TOTALS[name]}")


@pytest.fixture(autouse=True)
def _no_faults_left(request: pytest.FixtureRequest) -> Any:
    """Each scenario must leave every count (but the audits) at zero."""
    yield
    bad = {k: v for k, v in TOTALS.items() if k != "conversations audited" and v}
    assert not bad, bad
