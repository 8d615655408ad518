"""Lessons are never lost to one edit: earlier versions are kept and can be restored, and
an edit that removes most of a lesson waits for the owner's approval (issue 18, defect 8).
All on fakes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.agent.stream.events import ApprovalRequiredEvent
from shared.agent.stream.transcript import Frame
from shared.clock import SystemClock
from shared.lessons.text import removed_chars
from shared.llm.base import Finish, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Conversation, Lesson, ToolCall, ToolResult
from shared.schemas.tasks import TASK_PAYLOAD
from shared.store.memory import InMemoryLessonStore
from shared.tools.base import ToolContext, ToolOutput, ToolRegistry
from shared.tools.documents import document_tools
from shared.tools.people import delete_lesson_tool, restore_lesson_tool
from tests.unit.helpers import ALICE, Fakes, Harness, api_of, make_service, serving

NOW = datetime(2026, 3, 1, tzinfo=UTC)
BODY = """<lesson>
<h1>Tides</h1>
<p>The sea rises and falls twice a day, pulled by the Moon and the Sun.</p>
<exercise id="ex-1" type="true-false">
<statement id="s-1" answer="true">There are two high tides most days.</statement>
</exercise>
<exercise id="ex-2" type="short-answer">
<question id="q-1"><prompt>What pulls the sea?</prompt></question>
</exercise>
</lesson>"""
WIPED = "<lesson>\n<p>Ignore the lesson.</p>\n</lesson>"
WIPE = ("edit_document", {"find": BODY, "replace": WIPED})
AUTH = {"Authorization": "Bearer alice-token"}


def lesson(body: str = BODY, version: int = 1) -> Lesson:
    return Lesson(
        id="les_1", title="Tides", body=body, version=version, created_at=NOW, updated_at=NOW
    )


def calls(*pairs: tuple[str, dict[str, Any]]) -> Step:
    return Step(
        [
            *(
                ToolCallRequest(f"p{n}", name, json.dumps(args))
                for n, (name, args) in enumerate(pairs)
            ),
            Finish("tool_calls"),
        ]
    )


async def harness(provider: ScriptedProvider, **settings: int) -> Harness:
    fakes = Fakes(lessons=InMemoryLessonStore(versions_kept=settings.pop("kept", 20)))
    await fakes.lessons.create("alice", lesson())
    clock = SystemClock()
    tools = ToolRegistry(
        [
            *document_tools(fakes.lessons, clock),
            delete_lesson_tool(fakes.lessons),
            restore_lesson_tool(fakes.lessons, clock),
        ]
    )
    return make_service(provider, fakes=fakes, tools=tools, **settings)


async def send(service: Harness, text: str) -> tuple[str, list[Frame]]:
    sent = await service.agent.send(ALICE, text, None, document_id="les_1")
    assert sent.run is not None
    frames: list[Frame] = []
    await sent.run.execute(frames.append)
    return sent.conversation_id, frames


async def conversation(service: Harness, conversation_id: str) -> Conversation:
    found = await service.store.get("alice", conversation_id)
    assert found is not None
    return found


def the_call(conversation: Conversation, name: str) -> ToolCall:
    (call,) = [
        p.tool_call
        for m in conversation.messages
        for p in m.content
        if p.tool_call is not None and p.tool_call.name == name
    ]
    return call


def results(conversation: Conversation) -> list[ToolResult]:
    return [p.tool_result for m in conversation.messages for p in m.content if p.tool_result]


async def approve(service: Harness, conversation_id: str, call_id: str) -> None:
    """The owner approves; the task the approval queues runs the call."""
    service.fakes.queue.take()
    await service.agent.decide(
        "alice", conversation_id, call_id, approved=True, reason=None, background=False
    )
    (task,) = [t for t in service.fakes.queue.take() if t.name.startswith("task_")]
    await service.handler().handle(TASK_PAYLOAD.validate_json(task.body))


async def run_again(service: Harness, conversation_id: str, call: ToolCall) -> ToolOutput:
    """The call run once more with its stored arguments, as a redelivered task would
    after dying between applying it and recording its result."""
    parsed = service.deps.tools.parse(ToolCallRequest(call.id, call.name, call.args_json))
    return await parsed.run(ToolContext("alice", conversation_id, call.id, "les_1"))


async def stored(service: Harness) -> Lesson:
    found = await service.fakes.lessons.get("alice", "les_1")
    assert found is not None
    return found


# -- an edit that removes most of a lesson asks first -----------------------------------


@pytest.mark.leaves_steps("the run waits for approval; the reply after it never comes")
async def test_an_edit_that_wipes_the_lesson_waits_for_approval() -> None:
    # On the code before this change the wipe went straight through: version 2 held one
    # paragraph, both exercises gone, and no earlier version was kept anywhere.
    provider = ScriptedProvider([calls(WIPE), Step.reply("Done.")])
    service = await harness(provider)
    conversation_id, frames = await send(service, "tidy it up")

    assert [f.event.type for f in frames if f.event.type != "usage"] == [
        "run_start",
        "approval_required",
        "done",
    ]
    approval = frames[2].event
    assert isinstance(approval, ApprovalRequiredEvent) and approval.tool == "edit_document"
    assert approval.display_text == (
        "Removing most of “Tides”: 94% of its text and 2 of its 2 exercises"
    )
    # Pinned to the lesson and the version the check read.
    assert approval.args["lesson_id"] == "les_1" and approval.args["version"] == 1
    assert await stored(service) == lesson()
    call = the_call(await conversation(service, conversation_id), "edit_document")
    assert (call.status, call.approval) == ("awaiting_approval", True)


async def test_an_approved_wipe_is_applied_and_the_lesson_before_it_is_kept() -> None:
    provider = ScriptedProvider([calls(WIPE), Step.reply("Replaced.")])
    service = await harness(provider)
    conversation_id, _ = await send(service, "start again from scratch")
    call = the_call(await conversation(service, conversation_id), "edit_document")

    await approve(service, conversation_id, call.id)

    after = await stored(service)
    assert (after.body, after.version) == (WIPED, 2)
    kept = await service.fakes.lessons.version("alice", "les_1", 1)
    assert kept is not None and kept.as_lesson() == lesson()
    (result,) = results(await conversation(service, conversation_id))
    assert result.status == "ok" and (result.document_id, result.document_version) == ("les_1", 2)
    assert (await conversation(service, conversation_id)).messages[-1].text == "Replaced."
    # Run again (at-least-once delivery): done already, not refused, nothing changed.
    again = await run_again(service, conversation_id, call)
    assert again.value["version"] == 2 and await stored(service) == after


async def test_a_denied_wipe_changes_nothing() -> None:
    provider = ScriptedProvider([calls(WIPE), Step.reply("I have left it.")])
    service = await harness(provider)
    conversation_id, _ = await send(service, "tidy it up")
    call = the_call(await conversation(service, conversation_id), "edit_document")

    resumed = await service.agent.decide(
        "alice", conversation_id, call.id, approved=False, reason="no", background=False
    )
    assert resumed.run is not None
    await resumed.run.execute()

    assert await stored(service) == lesson()
    assert await service.fakes.lessons.versions("alice", "les_1") == []
    assert the_call(await conversation(service, conversation_id), "edit_document").status == (
        "denied"
    )


async def test_an_approved_wipe_is_not_applied_to_a_lesson_that_changed_meanwhile() -> None:
    provider = ScriptedProvider([calls(WIPE), Step.reply("It had changed.")])
    service = await harness(provider)
    conversation_id, _ = await send(service, "tidy it up")
    call = the_call(await conversation(service, conversation_id), "edit_document")
    # Another edit lands while the owner decides (the wipe's text is still there).
    newer = lesson(BODY.replace("<h1>Tides</h1>", "<h1>Tides</h1>\n<p>Read me.</p>"), 2)
    await service.fakes.lessons.replace("alice", newer, 1)

    await approve(service, conversation_id, call.id)

    assert await stored(service) == newer
    (result,) = results(await conversation(service, conversation_id))
    assert result.status == "error"
    assert "changed since version 1 (it is now version 2)" in result.output_json


async def test_small_edits_and_an_added_exercise_need_no_approval() -> None:
    added = (
        '<exercise id="ex-3" type="short-answer">\n'
        '<question id="q-3"><prompt>Why?</prompt></question>\n</exercise>'
    )
    provider = ScriptedProvider(
        [
            calls(
                ("edit_document", {"find": "twice a day", "replace": "about twice a day"}),
                ("edit_document", {"find": "</lesson>", "replace": added + "\n</lesson>"}),
            ),
            Step.reply("Done."),
        ]
    )
    service = await harness(provider)
    _, frames = await send(service, "improve it")

    assert "approval_required" not in [f.event.type for f in frames]
    after = await stored(service)
    assert after.version == 3 and "about twice a day" in after.body and 'id="ex-3"' in after.body
    assert [k.version for k in await service.fakes.lessons.versions("alice", "les_1")] == [2, 1]


@pytest.mark.leaves_steps("the run waits for approval; the reply after it never comes")
async def test_removing_most_exercises_asks_even_when_little_text_goes() -> None:
    long_intro = "<p>" + "The tide tables for this week. " * 20 + "</p>"
    body = BODY.replace("<h1>Tides</h1>", "<h1>Tides</h1>\n" + long_intro)
    exercises = body[body.index("<exercise") : body.index("</lesson>")]
    assert removed_chars(exercises, "") < len(body) / 2  # most of the text stays
    provider = ScriptedProvider(
        [calls(("edit_document", {"find": exercises, "replace": ""})), Step.reply("Ok.")]
    )
    service = await harness(provider)
    await service.fakes.lessons.replace("alice", lesson(body, 2), 1)
    _, frames = await send(service, "shorten it")

    approval = next(f.event for f in frames if isinstance(f.event, ApprovalRequiredEvent))
    assert approval.display_text.endswith("and 2 of its 2 exercises")


async def test_the_model_cannot_point_an_edit_at_another_lesson() -> None:
    other = ("edit_document", {"find": "Tides", "replace": "Waves", "lesson_id": "les_other"})
    provider = ScriptedProvider([calls(other), Step.reply("I could not.")])
    service = await harness(provider)
    conversation_id, _ = await send(service, "edit")
    (result,) = results(await conversation(service, conversation_id))
    assert result.status == "error" and "open in this conversation only" in result.output_json
    assert await stored(service) == lesson()


def test_pinned_arguments_are_not_offered_to_the_model() -> None:
    clock = SystemClock()
    lessons = InMemoryLessonStore()
    registry = ToolRegistry([*document_tools(lessons, clock), restore_lesson_tool(lessons, clock)])
    specs = {spec.name: spec.parameters for spec in registry.specs()}
    assert set(specs["edit_document"]["properties"]) == {"find", "replace", "version"}
    assert set(specs["restore_lesson"]["properties"]) == {"lessonId", "version"}


@pytest.mark.parametrize(
    ("old", "new", "removed"),
    [
        ("abc\ndef\n", "abc\ndXf\n", 1),  # only the changed stretch, within its line
        ("a\nb\nc\n", "c\nb\na\n", 0),  # moved lines are kept
        ("one\ntwo\n", "", 8),
        ("", "added", 0),
        ("x" * 1000, "y" * 1000, 1000),  # one long line rewritten
        # Half the lines go (two characters fewer: the common end is cut mid-line); this
        # took difflib's line matching 400 s.
        ("<p>a</p>\n" * 3000, "<p>a</p>\n<li>b</li>\n" * 1500, 13498),
    ],
)
def test_removed_chars_counts_what_does_not_survive(old: str, new: str, removed: int) -> None:
    assert removed_chars(old, new) == removed


# -- versions are kept, and restored ---------------------------------------------------


async def test_versions_are_bounded_and_the_oldest_go_first() -> None:
    lessons = InMemoryLessonStore(versions_kept=3)
    await lessons.create("alice", lesson())
    for version in range(2, 7):
        await lessons.replace(
            "alice", lesson(f"<lesson><p>{version}</p></lesson>", version), version - 1
        )
    listed = await lessons.versions("alice", "les_1")
    assert [k.version for k in listed] == [5, 4, 3]
    assert await lessons.version("alice", "les_1", 2) is None
    with pytest.raises(ValueError, match="version 8 cannot replace 6"):  # always the next
        await lessons.replace("alice", lesson(version=8), 6)


async def test_restore_lesson_waits_for_approval_then_brings_the_version_back() -> None:
    provider = ScriptedProvider(
        [calls(("restore_lesson", {"lessonId": "les_1", "version": 1})), Step.reply("Back.")]
    )
    service = await harness(provider)
    await service.fakes.lessons.replace("alice", lesson(WIPED, 2), 1)
    conversation_id, frames = await send(service, "undo that")

    approval = next(f.event for f in frames if isinstance(f.event, ApprovalRequiredEvent))
    assert approval.display_text == "Restoring version 1 of “Tides”"
    assert approval.args == {"lessonId": "les_1", "version": 1, "replacing": 2}
    assert (await stored(service)).version == 2  # nothing yet

    call = the_call(await conversation(service, conversation_id), "restore_lesson")
    await approve(service, conversation_id, call.id)

    after = await stored(service)
    assert (after.body, after.version) == (BODY, 3)
    assert [k.version for k in await service.fakes.lessons.versions("alice", "les_1")] == [2, 1]
    (result,) = results(await conversation(service, conversation_id))
    assert result.status == "ok" and result.document_version == 3
    again = await run_again(service, conversation_id, call)
    assert again.value["version"] == 3 and await stored(service) == after


async def test_restore_lesson_refuses_a_version_not_kept_without_asking() -> None:
    provider = ScriptedProvider(
        [calls(("restore_lesson", {"lessonId": "les_1", "version": 7})), Step.reply("Sorry.")]
    )
    service = await harness(provider)
    await service.fakes.lessons.replace("alice", lesson(WIPED, 2), 1)
    conversation_id, frames = await send(service, "undo")
    assert "approval_required" not in [f.event.type for f in frames]
    (result,) = results(await conversation(service, conversation_id))
    assert "Version 7 of this lesson is not kept; the kept versions are 1." in result.output_json


async def test_an_approved_restore_is_not_applied_over_a_newer_change() -> None:
    provider = ScriptedProvider(
        [calls(("restore_lesson", {"lessonId": "les_1", "version": 1})), Step.reply("Hm.")]
    )
    service = await harness(provider)
    await service.fakes.lessons.replace("alice", lesson(WIPED, 2), 1)
    conversation_id, _ = await send(service, "undo")
    call = the_call(await conversation(service, conversation_id), "restore_lesson")
    third = lesson("<lesson><p>three</p></lesson>", 3)
    await service.fakes.lessons.replace("alice", third, 2)

    await approve(service, conversation_id, call.id)

    assert await stored(service) == third
    (result,) = results(await conversation(service, conversation_id))
    assert result.status == "error" and "changed since version 2" in result.output_json


@pytest.mark.leaves_steps("the run waits for approval; the reply after it never comes")
async def test_a_delete_asks_in_words_naming_the_lesson_by_its_title() -> None:
    # Before, the owner's card said "Deleting a lesson", the lesson only as its id in the
    # arguments; one not found keeps those words (it fails when it runs, as before).
    provider = ScriptedProvider(
        [calls(("delete_lesson", {"lessonId": "les_1"}), ("delete_lesson", {"lessonId": "gone"}))]
    )
    service = await harness(provider)
    conversation_id, frames = await send(service, "delete it")
    asked = [f.event for f in frames if isinstance(f.event, ApprovalRequiredEvent)]
    assert [a.display_text for a in asked] == ["Delete the lesson “Tides”", "Deleting a lesson"]
    stored_calls = [
        p.tool_call
        for m in (await conversation(service, conversation_id)).messages
        for p in m.content
        if p.tool_call is not None
    ]
    assert [c.display_text for c in stored_calls] == [
        "Delete the lesson “Tides”",
        "Deleting a lesson",
    ]
    assert [c.status for c in stored_calls] == ["awaiting_approval"] * 2
    assert await stored(service) == lesson()  # nothing yet


async def test_a_deleted_lesson_is_kept_and_can_be_restored() -> None:
    provider = ScriptedProvider([calls(("delete_lesson", {"lessonId": "les_1"})), Step.reply("")])
    service = await harness(provider)
    conversation_id, _ = await send(service, "delete it")
    await approve(
        service,
        conversation_id,
        the_call(await conversation(service, conversation_id), "delete_lesson").id,
    )
    assert await service.fakes.lessons.get("alice", "les_1") is None

    async with serving(api_of(service)) as client:
        listed = await client.get("/api/spark/lessons/les_1/versions", headers=AUTH)
        assert listed.status_code == 200
        assert listed.json()["currentVersion"] is None
        assert [v["version"] for v in listed.json()["versions"]] == [1]
        restored = await client.post(
            "/api/spark/lessons/les_1/restore", headers=AUTH, json={"version": 1}
        )
    assert restored.status_code == 200
    assert restored.json() == {"lessonId": "les_1", "version": 2, "restoredFrom": 1}
    back = await stored(service)
    assert (back.body, back.version) == (BODY, 2)


# -- the API ---------------------------------------------------------------------------


async def test_api_lists_versions_and_restores_one_as_a_new_version() -> None:
    service = await harness(ScriptedProvider([]))
    lessons = service.fakes.lessons
    await lessons.replace("alice", lesson(WIPED, 2), 1)
    async with serving(api_of(service)) as client:
        listed = await client.get("/api/spark/lessons/les_1/versions", headers=AUTH)
        restored = await client.post(
            "/api/spark/lessons/les_1/restore", headers=AUTH, json={"version": 1}
        )
        again = await client.get("/api/spark/lessons/les_1/versions", headers=AUTH)

    assert listed.status_code == 200
    assert listed.json() == {
        "lessonId": "les_1",
        "currentVersion": 2,
        "versions": [
            {
                "version": 1,
                "title": "Tides",
                "savedAt": "2026-03-01T00:00:00Z",
                "characters": len(BODY),
            }
        ],
    }
    assert restored.status_code == 200
    assert restored.json() == {"lessonId": "les_1", "version": 3, "restoredFrom": 1}
    assert (await stored(service)).body == BODY
    assert again.json()["currentVersion"] == 3
    assert [v["version"] for v in again.json()["versions"]] == [2, 1]  # the wipe is kept too


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/api/spark/lessons/les_none/versions", None, 404, "not_found"),
        ("/api/spark/lessons/les_none/restore", {"version": 1}, 404, "not_found"),
        ("/api/spark/lessons/les_1/restore", {"version": 9}, 404, "not_found"),
        ("/api/spark/lessons/les_1/restore", {"version": 2}, 404, "not_found"),  # current
        ("/api/spark/lessons/les_1/restore", {"version": "1"}, 400, "invalid_request"),
        ("/api/spark/lessons/les_1/restore", {"version": 1, "x": 1}, 400, "invalid_request"),
        ("/api/spark/lessons/les_1/versions", {}, 405, "method_not_allowed"),
    ],
)
async def test_api_refuses_unknown_lessons_and_versions_and_changes_nothing(
    path: str, body: dict[str, object] | None, status: int, code: str
) -> None:
    service = await harness(ScriptedProvider([]))
    await service.fakes.lessons.replace("alice", lesson(WIPED, 2), 1)
    async with serving(api_of(service)) as client:
        if path.endswith("versions") and body is None:
            response = await client.get(path, headers=AUTH)
        else:
            response = await client.post(path, headers=AUTH, json=body)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)
    assert (await stored(service)).version == 2


async def test_api_keeps_lessons_to_their_owner() -> None:
    service = await harness(ScriptedProvider([]))
    await service.fakes.lessons.replace("alice", lesson(WIPED, 2), 1)
    bob = {"Authorization": "Bearer bob-token"}
    async with serving(api_of(service)) as client:
        listed = await client.get("/api/spark/lessons/les_1/versions", headers=bob)
        restored = await client.post(
            "/api/spark/lessons/les_1/restore", headers=bob, json={"version": 1}
        )
        anonymous = await client.get("/api/spark/lessons/les_1/versions")
    assert (listed.status_code, restored.status_code, anonymous.status_code) == (404, 404, 401)
    assert (await stored(service)).version == 2


class RacingLessons(InMemoryLessonStore):
    """Another process changes the lesson between a restore's read and its write."""

    async def replace(self, user_id: str, lesson: Lesson, expected_version: int) -> Lesson:
        if lesson.body == BODY:  # the restore's write
            sneaked = lesson.model_copy(update={"body": "<lesson><p>other</p></lesson>"})
            await super().replace(user_id, sneaked, expected_version)
        return await super().replace(user_id, lesson, expected_version)


async def test_api_restore_that_loses_a_race_is_409_and_loses_nothing() -> None:
    fakes = Fakes(lessons=RacingLessons())
    await fakes.lessons.create("alice", lesson())
    await fakes.lessons.replace("alice", lesson(WIPED, 2), 1)
    service = make_service(ScriptedProvider([]), fakes=fakes)
    async with serving(api_of(service)) as client:
        response = await client.post(
            "/api/spark/lessons/les_1/restore", headers=AUTH, json={"version": 1}
        )
    assert response.status_code == 409 and response.json()["error"]["code"] == "version_conflict"
    now = await fakes.lessons.get("alice", "les_1")
    assert now is not None and now.version == 3 and "other" in now.body
    assert [k.version for k in await fakes.lessons.versions("alice", "les_1")] == [2, 1]
