"""What a resumed AI SDK follow-up opens with: the results of the calls it follows, read
from the stored conversation (``shared/agent/chat.followed``)."""

from __future__ import annotations

from shared.agent.chat import followed
from shared.agent.waiting.results import follow_up_id
from shared.ids import task_id_for
from tests.unit.test_audit import (
    CID,
    NOW,
    assistant,
    call_part,
    conversation,
    result_part,
    results,
    running,
    task_state,
    user,
)


def test_a_follow_up_opens_with_each_result_and_the_tasks_final_section() -> None:
    source = assistant(
        "a1",
        call_part("c1", "complete"),
        call_part("d1", "denied", execution="inline", name="delete_lesson", approval=True),
        status="waiting",
    )
    active = running(NOW).model_copy(update={"assistant_message_id": follow_up_id("a1")})
    conv = conversation(
        user(),
        source,
        results("c1"),
        results("d1", result_part("d1", "error")),
        active_run=active,
        tasks=task_state("c1", "running"),
    )
    chunks = followed(conv)
    task_id = task_id_for(CID, "c1")
    assert [c["type"] for c in chunks] == [
        "tool-input-available",
        "tool-output-available",
        "data-task",
        "tool-input-available",
        "tool-output-denied",
    ]
    # The section's pointer may still say running (it ends once the follow-up is
    # written): the result says how it ended.
    assert chunks[2] == {
        "type": "data-task",
        "id": task_id,
        "data": {
            "taskId": task_id,
            "toolCallId": "c1",
            "tool": "create_lesson",
            "status": "completed",
            "displayText": "Working",
        },
    }


def test_a_run_that_follows_nothing_opens_with_nothing() -> None:
    assert followed(conversation(user(), assistant("a1"))) == []
    assert followed(conversation(user(), active_run=running(NOW))) == []
