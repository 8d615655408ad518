from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from shared.schemas.api import SendMessageRequest
from shared.schemas.documents import ContentPart, Conversation, Message
from shared.schemas.export import DOCUMENTS, FAMILY_SCHEMA_PATH, SCHEMA_PATH, render
from tools import eventschema
from tools.eventschema import EVENTS_PATH

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_schema_file_is_current() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render(), (
        "schemas/firestore.schema.json is stale: run `make schemas`"
    )
    for path in DOCUMENTS:
        assert path.read_text(encoding="utf-8") == render(path), f"{path.name} is stale"
    assert EVENTS_PATH.read_text(encoding="utf-8") == eventschema.render(), (
        "schemas/events.schema.json is stale: run `make schemas`"
    )


def test_family_mirror_schema_describes_the_mirror() -> None:
    schema = json.loads(FAMILY_SCHEMA_PATH.read_text(encoding="utf-8"))
    assert set(schema["required"]) == {"familyId", "name", "myRole", "members", "updatedAt"}
    assert "/{userId}/client/family/current" in schema["$comment"]


def test_conversation_round_trips_as_camel_case() -> None:
    message = Message(
        id="m1", role="user", created_at=NOW, status="complete", content=[ContentPart.of_text("hi")]
    )
    conversation = Conversation(
        id="c1",
        participant_ids=["u"],
        created_at=NOW,
        updated_at=NOW,
        last_message_at=NOW,
        messages=[message],
    )
    stored = conversation.to_firestore()
    assert {"participantIds", "createdAt", "lastMessageAt"} <= stored.keys()
    assert stored["messages"][0]["content"] == [{"type": "text", "text": "hi"}]
    assert Conversation.model_validate(stored) == conversation


def test_content_part_needs_its_payload() -> None:
    with pytest.raises(ValidationError):
        ContentPart(type="tool_call", text="not a call")


@pytest.mark.parametrize(
    "body",
    [
        {"text": ""},
        {"text": "   "},
        {"text": "é" * 16385},  # 32,770 bytes of UTF-8
        {"text": "hi", "colour": "red"},
        {"text": "hi", "conversationId": "../other"},
        {"text": 5},
    ],
)
def test_send_message_request_rejects_bad_bodies(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SendMessageRequest.model_validate(body)


def test_send_message_request_accepts_32_kb_of_text() -> None:
    request = SendMessageRequest.model_validate({"text": "a" * 32768, "conversationId": "conv_1"})
    assert request.conversation_id == "conv_1"


def test_openapi_document_is_current_and_served() -> None:
    from spark_http.openapi import OPENAPI_PATH, openapi, render

    assert OPENAPI_PATH.read_text(encoding="utf-8") == render(), (
        "schemas/openapi.json is stale: run `make schemas`"
    )
    document = openapi()
    assert document["openapi"] == "3.1.0"
    assert "/api/spark/agent/conversations/{conversationId}/answers" in document["paths"]
    assert set(document["paths"]["/api/spark/families/{familyId}/members/{userId}"]) == {
        "patch",
        "delete",
    }
