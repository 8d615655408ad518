"""The agent on lessons, on fakes: the open document, skills, edits seen live and on
resume, and the task tools that write lessons (create_lesson, plan_lessons)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from shared.agent.stream.events import ToolEndEvent, ToolStartEvent
from shared.agent.stream.replay import replay
from shared.agent.stream.sse import event_data
from shared.errors import NotFound, ProviderUnavailable
from shared.lessons.grammar import validate
from shared.llm.base import Finish, TextDelta, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Conversation, Lesson
from shared.tools.skills import load_skill_tool
from tests.unit.helpers import ALICE, BOB, Fakes, Harness, make_service
from tests.unit.test_tasks import deliver_all

NOW = datetime(2026, 11, 22, tzinfo=UTC)
SKILLS = Path(__file__).resolve().parents[2] / "prompts" / "skills"
START = "<lesson>\n<h1>French verbs</h1>\n<p>Today: être and avoir.</p>\n</lesson>"
EXERCISE = (
    '<exercise id="ex-fv-1" type="fill-blanks">\n'
    "<h3>Complete with être.</h3>\n"
    '<p>Je <blank answer="suis" hint="être" student-answer=""/> prêt.</p>\n'
    "</exercise>\n"
)
DRAFT = (
    '<lesson>\n<h1>Tides</h1>\n<exercise id="ex-1" type="true-false">\n'
    '<statement id="s-1" answer="true">The Moon pulls the sea.</statement>\n'
    "</exercise>\n</lesson>"
)


def call(name: str, args: dict[str, Any], call_id: str = "c") -> Step:
    return Step([ToolCallRequest(call_id, name, json.dumps(args)), Finish("tool_calls")])


async def with_lesson(fakes: Fakes, user: str = "alice", body: str = START) -> Lesson:
    return await fakes.lessons.create(
        user,
        Lesson(
            id="les_fv", title="French verbs", body=body, version=1, created_at=NOW, updated_at=NOW
        ),
    )


async def conversation(service: Harness, conversation_id: str) -> Conversation:
    found = await service.store.get("alice", conversation_id)
    assert found is not None
    return found


async def test_add_an_exercise_loads_the_skill_edits_the_open_lesson_and_sums_up() -> None:
    provider = ScriptedProvider(
        [
            call("load_skill", {"skill": "fill-blanks"}),
            call(
                "edit_document",
                {
                    "find": "<p>Today: être and avoir.</p>\n",
                    "replace": "<p>Today: être and avoir.</p>\n" + EXERCISE,
                },
            ),
            Step.reply("I added a fill-in-the-blank exercise on être."),
        ]
    )
    fakes = Fakes()
    await with_lesson(fakes)
    service = make_service(provider, fakes=fakes)
    sent = await service.agent.send(
        ALICE, "Add a fill-in-the-blank exercise about French verbs", None, document_id="les_fv"
    )
    assert sent.run is not None
    frames: list[Any] = []
    await sent.run.execute(frames.append)

    starts = [f.event for f in frames if isinstance(f.event, ToolStartEvent)]
    assert [s.display_text for s in starts] == ["Checking fill-blanks rules", "Editing document"]
    ends = [f for f in frames if isinstance(f.event, ToolEndEvent)]
    assert event_data(ends[0].event) == {"id": starts[0].id, "status": "success"}
    assert event_data(ends[1].event) == {
        "id": starts[1].id,
        "status": "success",
        "documentId": "les_fv",
        "version": 2,
    }
    lesson = await fakes.lessons.get("alice", "les_fv")
    assert lesson is not None and lesson.version == 2 and 'id="ex-fv-1"' in lesson.body
    validate(lesson.body)

    stored = await conversation(service, sent.conversation_id)
    assert stored.document_id == "les_fv"
    assert stored.messages[0].document_id == "les_fv"
    assert stored.messages[-1].text == "I added a fill-in-the-blank exercise on être."
    # The model was told which lesson is open, and read the skill before editing.
    assert "A lesson is open in this conversation (id les_fv)" in provider.requests[0].system
    assert "student-answer" in provider.requests[1].messages[-1].text
    # Resume rebuilds the same tool_end, with the lesson and its version, under the same id.
    replayed = {
        f.id: f.event for f in replay(stored.messages[-1], stored.id, stored.messages[0].id)
    }
    assert replayed[ends[1].id] == ends[1].event


async def test_another_users_lesson_is_not_found_and_nothing_is_written() -> None:
    fakes = Fakes()
    await with_lesson(fakes, user="bob")
    service = make_service(ScriptedProvider([]), fakes=fakes)
    with pytest.raises(NotFound, match="No lesson with this documentId"):
        await service.agent.send(ALICE, "edit it", None, document_id="les_fv")
    assert fakes.store.written == {} and fakes.store.writes == {}
    sent = await service.agent.send(BOB, "hello", None, document_id="les_fv", background=True)
    assert sent.run is None  # Bob's own lesson is fine


async def test_a_later_message_names_another_lesson_and_the_tools_follow_it() -> None:
    provider = ScriptedProvider(
        [Step.reply("Hi."), call("get_document_info", {}), Step.reply("Ok.")]
    )
    fakes = Fakes()
    await with_lesson(fakes)
    second = START.replace("French verbs", "Tides")
    await fakes.lessons.create(
        "alice",
        Lesson(id="les_t", title="Tides", body=second, version=3, created_at=NOW, updated_at=NOW),
    )
    service = make_service(provider, fakes=fakes)
    sent = await service.agent.send(ALICE, "hi", None, document_id="les_fv")
    assert sent.run is not None
    await sent.run.execute()
    again = await service.agent.send(
        ALICE, "how long is it?", sent.conversation_id, document_id="les_t"
    )
    assert again.run is not None
    await again.run.execute()
    stored = await conversation(service, sent.conversation_id)
    assert stored.document_id == "les_t"
    info = json.loads(stored.messages[-1].content[1].tool_result.output_json)  # type: ignore[union-attr]
    assert (info["documentId"], info["title"], info["version"]) == ("les_t", "Tides", 3)


async def test_create_lesson_repairs_an_invalid_draft_and_opens_the_lesson() -> None:
    brief = {"topic": "tides", "audience": "Year 5"}
    provider = ScriptedProvider(
        [
            call("create_lesson", brief, "c1"),
            Step.reply("Here it is:\n```xml\n<lesson><h1>Tides</h1><p>Oops</lesson>\n```"),
            Step.reply(DRAFT),
            Step.reply("Your lesson on tides is ready."),
        ]
    )
    fakes, stored = await until_answered(provider, "make a lesson on tides")

    repair = provider.requests[2].messages[-1].text
    assert repair.startswith("That is not a valid lesson: Line 1, column")
    assert "<exercise" in provider.requests[1].system  # the drafting model has the skills
    result = next(p.tool_result for m in stored.messages for p in m.content if p.tool_result)
    assert result is not None and result.status == "ok"
    lesson_id = result.document_id
    assert lesson_id is not None and result.document_version == 1
    lesson = await fakes.lessons.get("alice", lesson_id)
    assert lesson is not None and (lesson.title, lesson.version, lesson.body) == ("Tides", 1, DRAFT)
    assert stored.document_id == lesson_id
    assert json.loads(result.output_json)["outline"] == ["Tides", 'exercise "ex-1" (true-false)']
    assert stored.messages[-1].text == "Your lesson on tides is ready."


async def test_create_lesson_that_stays_invalid_is_reported_and_nothing_stored() -> None:
    provider = ScriptedProvider(
        [
            call("create_lesson", {"topic": "tides", "audience": "Year 5"}, "c1"),
            Step.reply("<lesson><div/></lesson>"),
            Step.reply("<lesson><div/></lesson>"),
            Step.reply("Sorry, I could not write it."),
        ]
    )
    fakes, stored = await until_answered(provider, "make a lesson on tides")
    result = next(p.tool_result for m in stored.messages for p in m.content if p.tool_result)
    assert result is not None and result.status == "error"
    assert "<div> is not part of the lesson grammar" in json.loads(result.output_json)["error"]
    assert fakes.lessons._documents == {}
    assert stored.document_id is None


async def until_answered(provider: ScriptedProvider, text: str) -> tuple[Fakes, Conversation]:
    """Send ``text``, run the reply and every task it queues; the conversation then."""
    fakes = Fakes()
    service = make_service(provider, fakes=fakes)
    sent = await service.agent.send(ALICE, text, None)
    assert sent.run is not None
    await sent.run.execute()
    await deliver_all(service, fakes.queue)
    return fakes, await conversation(service, sent.conversation_id)


def plan(count: int) -> Step:
    entries = [{"title": f"Tides {i + 1}", "focus": f"part {i + 1}"} for i in range(count)]
    return Step.reply(json.dumps({"lessons": entries}))


async def test_plan_lessons_is_one_task_whose_progress_appends_to_its_section() -> None:
    provider = ScriptedProvider(
        [
            call("plan_lessons", {"topic": "tides", "audience": "Year 5", "count": 3}, "c1"),
            plan(2),  # the wrong number: asked again
            plan(3),
            Step.reply(DRAFT.replace("<h1>Tides</h1>", "<h1>High and low</h1>")),
            Step.reply(DRAFT),
            Step.reply(DRAFT),
            Step.reply("Three lessons on tides are ready."),
        ]
    )
    fakes = Fakes()
    service = make_service(provider, fakes=fakes)
    sent = await service.agent.send(ALICE, "plan three lessons on tides", None)
    assert sent.run is not None
    await sent.run.execute()
    ledger = await fakes.ledger.get("alice")
    assert len(ledger.tasks) == 1  # one task against the per-user limit
    await deliver_all(service, fakes.queue)

    (section,) = await fakes.sections.recent("alice")
    assert section.status == "completed"
    assert [update.text for update in section.updates] == [
        "Planning 3 lessons",
        "Creating lesson 1 of 3",
        "Creating lesson 2 of 3",
        "Creating lesson 3 of 3",
    ]
    assert "2 lessons, not 3" in provider.requests[2].messages[-1].text
    stored = await conversation(service, sent.conversation_id)
    result = next(p.tool_result for m in stored.messages for p in m.content if p.tool_result)
    assert result is not None
    made = json.loads(result.output_json)["lessons"]
    assert [m["title"] for m in made] == ["High and low", "Tides", "Tides"]
    assert section.summary == "Planned and wrote 3 lessons."
    assert [(o.kind, o.text) for o in section.key_outputs or []] == [
        ("planned_lesson", "High and low"),
        ("planned_lesson", "Tides"),
        ("planned_lesson", "Tides"),
    ]
    for entry in made:
        lesson = await fakes.lessons.get("alice", entry["documentId"])
        assert lesson is not None and (lesson.status, lesson.version) == ("ready", 2)
        validate(lesson.body)
    assert stored.document_id == made[0]["documentId"]
    assert "Lesson 2 of 3 in the sequence: 1. Tides 1; 2. Tides 2; 3. Tides 3" in (
        provider.requests[4].messages[0].text
    )


async def test_a_retried_plan_keeps_its_plan_and_the_lessons_already_written() -> None:
    provider = ScriptedProvider(
        [
            call("plan_lessons", {"topic": "tides", "audience": "Year 5", "count": 2}, "c1"),
            plan(2),
            Step.reply(DRAFT),
            Step([TextDelta("<lesson>")], error=ProviderUnavailable("The model is unavailable.")),
            Step.reply(DRAFT),  # the retry writes lesson 2 only: no new plan, no new lesson 1
            Step.reply("Both are ready."),
        ]
    )
    fakes = Fakes()
    service = make_service(provider, fakes=fakes, task_retry_base_ms=10)
    sent = await service.agent.send(ALICE, "plan two lessons on tides", None)
    assert sent.run is not None
    await sent.run.execute()
    await deliver_all(service, fakes.queue)
    stored = await conversation(service, sent.conversation_id)
    assert stored.messages[-1].text == "Both are ready."
    lessons = list(fakes.lessons._documents.values())
    assert sorted((d["title"], d["version"], d["status"]) for d in lessons) == [
        ("Tides", 2, "ready"),
        ("Tides", 2, "ready"),
    ]


async def test_more_than_ten_planned_lessons_is_refused_to_the_model() -> None:
    provider = ScriptedProvider(
        [
            call("plan_lessons", {"topic": "tides", "audience": "Year 5", "count": 11}),
            Step.reply("I can plan at most ten."),
        ]
    )
    service = make_service(provider)
    sent = await service.agent.send(ALICE, "plan eleven", None)
    assert sent.run is not None
    await sent.run.execute()
    stored = await conversation(service, sent.conversation_id)
    result = stored.messages[-1].content[1].tool_result
    assert result is not None and result.status == "error"
    assert "count: Input should be less than or equal to 10" in result.output_json


def test_load_skill_offers_exactly_the_skills_in_the_folder(tmp_path: Path) -> None:
    spec = load_skill_tool(SKILLS).spec()
    enum = spec.parameters["properties"]["skill"]["enum"]
    assert {p.stem for p in SKILLS.glob("*.md")} == set(enum)
    assert spec.parameters["required"] == ["skill"]
    (tmp_path / "haiku.md").write_text("Five, seven, five.")
    (tmp_path / "Not A Skill.md").write_text("ignored")
    tool = load_skill_tool(tmp_path)
    assert tool.spec().parameters["properties"]["skill"]["enum"] == ["haiku"]
    assert tool.display(tool.args.model_validate({"skill": "haiku"})) == "Checking haiku rules"
