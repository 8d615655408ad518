"""Every visual part carries a description (issue 23): each tool's result says in words
what it shows, the schema requires it of every part but text, and parts written without
one (or stored before) get one."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.clock import SystemClock
from shared.config import Settings
from shared.llm.scripted import ScriptedProvider
from shared.queue.memory import InMemoryTaskQueue
from shared.schemas.documents import (
    MAX_DESCRIPTION_CHARS,
    ContentPart,
    FileRef,
    KeyOutput,
    ToolCall,
    ToolResult,
)
from shared.schemas.export import TASK_SCHEMA_PATH, firestore_schema
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.tasks.sections import summarise
from shared.tools.base import ToolRegistry
from shared.tools.descriptions import DESCRIBERS, describe_call, describe_output
from shared.wiring import assemble

# One output of each tool, as its run returns it (or, for the client's and the user's
# tools, as their result is posted).
OUTPUTS: dict[str, tuple[dict[str, Any], Any]] = {
    "load_skill": ({"skill": "lesson-planning"}, {"skill": "lesson-planning", "body": "…"}),
    "read_document": ({}, "Fractions (12 lines, 80 words, version 3)\n---\n1: <lesson>"),
    "search_document": ({"query": "halves"}, "2 matches"),
    "get_document_info": (
        {},
        {"documentId": "les_1", "title": "Fractions", "words": 80, "version": 3},
    ),
    "edit_document": (
        {"old_text": "a", "new_text": "b"},
        {"result": "…", "documentId": "les_1", "version": 4},
    ),
    "create_lesson": (
        {"topic": "Fractions"},
        {
            "documentId": "les_1",
            "title": "Fractions",
            "version": 1,
            "outline": ["Halves", "Quarters"],
        },
    ),
    "plan_lessons": (
        {"topic": "Fractions", "count": 2},
        {
            "lessons": [
                {"documentId": "a", "title": "Halves"},
                {"documentId": "b", "title": "Quarters"},
            ]
        },
    ),
    "ask_user_question": ({}, {"answers": {"Which year?": "Year 4"}}),
    "get_editor_selection": ({}, {"text": "selected"}),
    "delete_lesson": ({"lessonId": "les_1"}, {"deleted": "les_1", "title": "Fractions"}),
    "restore_lesson": (
        {"lessonId": "les_1", "version": 2},
        {"restored": 2, "documentId": "les_1", "title": "Fractions", "version": 5},
    ),
    "list_family_members": (
        {},
        {"family": "The Okafors", "members": [{"userId": "u1", "displayName": "Ada"}]},
    ),
    "read_family_messages": (
        {"limit": 20},
        {"note": "…", "messages": [{"from": {"displayName": "Ada"}, "text": "Pick up milk"}]},
    ),
    "send_family_message": (
        {"to": "u1", "text": "Please pick up milk"},
        {"sent": True, "to": "Ada (parent)", "conversationId": "dm_1", "messageId": "m1"},
    ),
    "review_work": (
        {"file": "x"},
        {
            "name": "essay.pdf",
            "status": "reviewed",
            "feedback": {
                "summary": "A clear essay.",
                "strengths": ["Structure"],
                "corrections": [{"issue": "Spelling"}],
                "mark": {"score": 7, "outOf": 10},
            },
        },
    ),
}


def registry() -> ToolRegistry:
    """Every tool the agent is built with, the family tools (``assemble``'s) included."""
    return assemble(
        Settings(),
        InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
        InMemoryTaskQueue(),
        ScriptedProvider([]),
        SystemClock(),
        system_prompt="You are Spark AI Agent.",
        titles=False,  # (no title calls: the model is scripted)
    ).deps.tools


def test_every_tool_describes_its_output_in_short_words() -> None:
    tools = registry()
    names = [spec.name for spec in tools.specs()]
    assert sorted(names) == sorted(DESCRIBERS), "a tool without a describer, or a stale one"
    assert sorted(names) == sorted(OUTPUTS)
    for name in names:
        tool = tools.get(name)
        assert tool is not None
        raw_args, value = OUTPUTS[name]
        args = tool.args.model_construct(**raw_args)
        description = describe_output(name, args, value)
        assert description, name
        assert len(description) <= MAX_DESCRIPTION_CHARS, name
        assert "{" not in description and "None" not in description, (name, description)


def test_a_family_message_is_described_without_its_words() -> None:
    """A description is read aloud and kept beside the result: a member's words (which
    an opt-out may withhold from the model) never appear in it."""
    for name in ("read_family_messages", "send_family_message"):
        raw_args, value = OUTPUTS[name]
        args = registry().get(name).args.model_construct(**raw_args)  # type: ignore[union-attr]
        assert "pick up" not in (describe_output(name, args, value) or "").lower()


def test_a_lesson_card_and_a_review_say_what_they_show() -> None:
    _, lesson = OUTPUTS["create_lesson"]
    card = describe_output("create_lesson", None, lesson)  # type: ignore[arg-type]
    assert card == "A lesson card: “Fractions”, covering: Halves; Quarters."
    _, review = OUTPUTS["review_work"]
    said = describe_output("review_work", None, review)  # type: ignore[arg-type]
    assert said is not None and "Mark: 7 out of 10." in said and "A clear essay." in said


def test_every_key_output_of_a_task_section_is_described() -> None:
    for tool, (_, value) in OUTPUTS.items():
        ending = summarise(tool, json.dumps(value), ok=True)
        for output in ending.key_outputs:
            assert output.description, (tool, output)
    (card,) = summarise(
        "create_lesson", json.dumps(OUTPUTS["create_lesson"][1]), ok=True
    ).key_outputs
    assert card.description == "A lesson card: Fractions. It covers: Halves; Quarters."


@pytest.mark.parametrize(
    "part",
    [
        ContentPart(
            type="image",
            file=FileRef(
                storage_path="u/a.jpg", content_type="image/jpeg", size_bytes=1, name="a.png"
            ),
        ),
        ContentPart(
            type="file",
            file=FileRef(
                storage_path="u/a.pdf", content_type="application/pdf", size_bytes=1, page_count=3
            ),
        ),
        ContentPart(
            type="tool_call",
            tool_call=ToolCall(
                id="c",
                name="x",
                args_json="{}",
                display_text="Creating lesson",
                execution="task",
                status="queued",
            ),
        ),
        ContentPart(
            type="tool_result",
            tool_result=ToolResult(
                tool_call_id="c",
                output_json="{}",
                status="ok",
                document_id="les_1",
                document_version=2,
            ),
        ),
    ],
)
def test_a_part_written_without_a_description_gets_one(part: ContentPart) -> None:
    assert part.description
    stored = part.to_firestore()
    assert stored["description"] == part.description
    # Read back from Firestore (also a part stored before descriptions existed).
    del stored["description"]
    assert ContentPart.model_validate(stored).description == part.description


def test_a_text_part_needs_no_description() -> None:
    assert "description" not in ContentPart.of_text("hi").to_firestore()


def test_the_document_schemas_require_a_description_of_every_visual_part() -> None:
    schema = firestore_schema()
    part = schema["$defs"]["ContentPart"]
    assert part["if"] == {"properties": {"type": {"const": "text"}}}
    assert part["else"] == {"required": ["description"]}
    task = firestore_schema(TASK_SCHEMA_PATH)
    assert "description" in task["$defs"]["KeyOutput"]["required"]
    assert KeyOutput(kind="mark", text="7 out of 10").description == "The mark: 7 out of 10."


def test_a_long_display_text_is_described_within_the_limit_and_reads_back() -> None:
    """A description made from a call's display text (a long question, an approval card
    quoting a long text) is cut to the limit, so the stored part validates again."""
    call = ToolCall(
        id="c",
        name="x",
        args_json="{}",
        display_text="Send to Dad: " + "a" * 2_000,
        execution="task",
        status="awaiting_approval",
        approval=True,
    )
    part = ContentPart(type="tool_call", tool_call=call)
    assert part.description is not None and len(part.description) <= MAX_DESCRIPTION_CHARS
    assert ContentPart.model_validate(part.to_firestore()) == part


def test_a_send_is_described_by_its_recipient_never_its_words() -> None:
    assert describe_call(
        "send_family_message", '{"to": "u1", "text": "Pick up milk", "recipient": "Ada (parent)"}'
    ) == ("Spark AI Agent asks to send a message to Ada (parent).")
    assert describe_call("send_family_message", "not json") is None
    assert describe_call("create_lesson", "{}") is None
