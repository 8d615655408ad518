"""``python -m tools.audit`` on the emulator: it reads what is stored, names what is
wrong, grouped by kind, and exits non-zero; a clean user passes."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore

from shared.agent.waiting.results import follow_up_id, result_message_id
from shared.schemas.documents import (
    ActiveRun,
    ContentPart,
    Conversation,
    Message,
    ToolCall,
    ToolResult,
)
from tools.audit import main, settle_and_audit

pytestmark = pytest.mark.emulator

NOW = datetime.now(UTC)


def message(mid: str, role: str, *parts: ContentPart, status: str = "complete") -> Message:
    return Message.model_validate(
        {"id": mid, "role": role, "created_at": NOW, "status": status, "content": list(parts)}
    )


def call(call_id: str, status: str) -> ContentPart:
    return ContentPart(
        type="tool_call",
        tool_call=ToolCall.model_validate(
            {
                "id": call_id,
                "name": "create_lesson",
                "args_json": "{}",
                "display_text": "Creating lesson",
                "execution": "task",
                "status": status,
            }
        ),
    )


def store(db: firestore.Client, uid: str, conversation: Conversation) -> None:
    conversations = db.collection(uid).document("client").collection("conversations")
    conversations.document(conversation.id).set(conversation.to_firestore())


def conversation(*messages: Message, **fields: object) -> Conversation:
    return Conversation.model_validate(
        {
            "id": f"conv_{secrets.token_hex(4)}",
            "participant_ids": ["u"],
            "created_at": NOW,
            "updated_at": NOW,
            "last_message_at": NOW,
            "messages": list(messages),
            **fields,
        }
    )


def test_audit_command_names_what_is_wrong_and_fails(
    db: firestore.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    uid = f"audit-{secrets.token_hex(4)}"
    hello = message("u1", "user", ContentPart.of_text("Hello"))
    # A call shown as queued that no ledger task will ever run...
    store(db, uid, conversation(hello, message("a1", "assistant", call("c1", "queued"))))
    # ...and a run whose producer died long ago.
    dead = ActiveRun(
        run_id="r1",
        status="streaming",
        assistant_message_id="a2",
        started_at=NOW - timedelta(hours=1),
        lease_expires_at=NOW - timedelta(minutes=10),
    )
    store(db, uid, conversation(hello, active_run=dead))

    assert main(["--user", uid]) == 1
    out = capsys.readouterr().out
    assert "call_without_task (1):" in out and "c1 (create_lesson)" in out
    assert "stale_run (1):" in out and "run r1 is streaming" in out
    assert "2 violation(s)" in out


def test_audit_command_passes_a_clean_user_and_waits_for_it_to_settle(
    db: firestore.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    uid = f"audit-{secrets.token_hex(4)}"
    done = conversation(
        message("u1", "user", ContentPart.of_text("Plan a lesson")),
        message("a1", "assistant", call("c1", "complete")),
        message(
            result_message_id("c1"),
            "tool",
            ContentPart(
                type="tool_result",
                tool_result=ToolResult(tool_call_id="c1", output_json="{}", status="ok"),
            ),
        ),
        message(follow_up_id("a1"), "assistant", ContentPart.of_text("Ready.")),
    )
    store(db, uid, done)
    assert main(["--user", uid, "--wait", "5"]) == 0
    assert "1 user(s) checked: no violations." in capsys.readouterr().out
    # A run still going when the wait ends is reported, not waited for longer.
    # Its lease from now, not from the module's import: the file may run minutes later.
    now = datetime.now(UTC)
    going = ActiveRun(
        run_id="r2",
        status="streaming",
        assistant_message_id="a3",
        started_at=now,
        lease_expires_at=now + timedelta(hours=1),
    )
    store(db, uid, conversation(message("u2", "user", ContentPart.of_text("Hi")), active_run=going))
    (found,) = settle_and_audit(db, [uid], timeout=0.5)
    assert found.kind == "unsettled" and "run r2 is still streaming" in found.detail
