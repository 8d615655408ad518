"""A task's section: the transition table, appended steps, summaries (pure, no I/O)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import IllegalTransition
from shared.schemas.documents import TaskDocument, TaskStatus
from shared.schemas.server import TaskRecord
from shared.tasks import sections
from shared.tasks.sections import MAX_UPDATES, TERMINAL, TRANSITIONS, Step

T0 = datetime(2026, 3, 1, tzinfo=UTC)
STATUSES: list[TaskStatus] = list(TRANSITIONS)


def record(status: TaskStatus = "queued", error: str | None = None) -> TaskRecord:
    return TaskRecord(
        task_id="task_1",
        conversation_id="conv_1",
        tool_call_id="call_1",
        tool="create_lesson",
        display_text="Creating lesson",
        seq=1,
        status=status,
        error=error,
        created_at=T0,
        updated_at=T0,
    )


def section(status: TaskStatus = "queued") -> TaskDocument:
    return sections.opened(record(), T0).model_copy(update={"status": status})


@given(st.lists(st.sampled_from(STATUSES), max_size=12))
def test_every_sequence_of_moves_obeys_the_one_table(moves: list[TaskStatus]) -> None:
    current = section()
    for target in moves:
        before = current.status
        try:
            current = sections.move(current, target, T0)
        except IllegalTransition:
            assert target != before and target not in TRANSITIONS[before]
            continue
        assert target == before or target in TRANSITIONS[before]
        assert current.status == target
        if before in TERMINAL:
            assert target == before  # terminal states are final
        if target in TERMINAL:
            assert current.ended_at is not None
        if target == "running":
            assert current.started_at is not None


def test_terminal_states_are_final_and_queued_cannot_complete_without_running() -> None:
    for status in TERMINAL:
        assert TRANSITIONS[status] == frozenset()
        with pytest.raises(IllegalTransition):
            sections.move(section(status), "running", T0)
    assert "completed" not in TRANSITIONS["queued"]
    assert {"waiting_on_user", "completed"} <= TRANSITIONS["running"]
    assert "running" in TRANSITIONS["waiting_on_user"]


def test_steps_append_in_order_and_a_redelivery_adds_nothing() -> None:
    running = sections.move(section(), "running", T0)
    steps = [Step(1, 1, "Planning 3 lessons"), Step(1, 2, "Creating lesson 1 of 3")]
    once = sections.with_steps(running, steps, T0)
    assert [(u.seq, u.text) for u in once.updates] == [
        (1, "Planning 3 lessons"),
        (2, "Creating lesson 1 of 3"),
    ]
    assert sections.with_steps(once, steps, T0 + timedelta(seconds=1)) is once
    # A retried attempt repeating the same steps continues after them.
    retried = sections.with_steps(
        once,
        [
            Step(2, 1, "Planning 3 lessons"),
            Step(2, 2, "Creating lesson 1 of 3"),
            Step(2, 3, "Creating lesson 2 of 3"),
        ],
        T0,
    )
    assert [u.text for u in retried.updates] == [
        "Planning 3 lessons",
        "Creating lesson 1 of 3",
        "Creating lesson 2 of 3",
    ]


def test_steps_are_bounded_the_oldest_folded_into_one_line() -> None:
    running = sections.move(section(), "running", T0)
    many = [Step(1, n, f"step {n} " + "x" * 400) for n in range(1, 101)]
    folded = sections.with_steps(running, many[:50], T0)
    folded = sections.with_steps(folded, many[50:], T0)
    assert len(folded.updates) == MAX_UPDATES
    head = folded.updates[0]
    assert head.folded == 100 - (MAX_UPDATES - 1)
    assert head.text == f"… {head.folded} earlier steps"
    assert folded.updates[-1].text.startswith("step 100")
    assert all(len(u.text) <= sections.MAX_TEXT for u in folded.updates)
    # Folded steps stay known: their redelivery appends nothing.
    assert sections.with_steps(folded, many[:3], T0) is folded
    seqs = [u.seq for u in folded.updates]
    assert seqs == sorted(seqs)


def test_a_finished_section_takes_no_more_steps() -> None:
    done = sections.ended(sections.move(section(), "running", T0), "completed", T0, None)
    assert sections.with_steps(done, [Step(1, 1, "late")], T0) is done


def test_the_section_follows_its_ledger_record() -> None:
    opened = sections.follow(None, record("queued"), T0)
    assert opened is not None and opened.status == "queued"
    assert sections.follow(opened, record("running"), T0) is None  # granted: not started
    ending = sections.Ending("Created the lesson “Tides”.")
    done = sections.follow(opened, record("completed"), T0, ending)
    assert done is not None and (done.status, done.summary) == ("completed", ending.summary)
    assert done.started_at is not None  # queued passes through running to completed
    assert sections.follow(done, record("completed"), T0) is None
    failed = sections.follow(opened, record("failed", "the model timed out"), T0)
    assert failed is not None and failed.summary == "This did not work: the model timed out."
    assert failed.key_outputs and failed.key_outputs[0].kind == "try"
    not_yet = sections.follow(opened, record("cancelled", sections.NOT_APPROVED), T0)
    assert not_yet is None  # its approval queues it again


def test_summaries_of_each_task_tool() -> None:
    lesson = sections.summarise(
        "create_lesson",
        json.dumps({"documentId": "les_1", "title": "Tides", "outline": ["Starter", "Main"]}),
        ok=True,
    )
    assert lesson.summary == "Created the lesson “Tides”."
    (made,) = lesson.key_outputs
    assert (made.kind, made.document_id, made.outline) == ("lesson", "les_1", ["Starter", "Main"])
    plan = sections.summarise(
        "plan_lessons",
        json.dumps(
            {"lessons": [{"documentId": "a", "title": "One"}, {"documentId": "b", "title": "Two"}]}
        ),
        ok=True,
    )
    assert [o.text for o in plan.key_outputs] == ["One", "Two"]
    feedback = {
        "summary": "A careful piece.",
        "strengths": ["Clear diagrams"],
        "corrections": [{"where": "Q2", "issue": "Units missing", "suggestion": "Add cm"}],
        "mark": {"score": 7, "outOf": 10, "reason": "two slips"},
    }
    review = sections.summarise(
        "review_work",
        json.dumps({"status": "reviewed", "name": "essay.pdf", "feedback": feedback}),
        ok=True,
    )
    assert review.summary == "A careful piece."
    assert [(o.kind, o.text) for o in review.key_outputs] == [
        ("strength", "Clear diagrams"),
        ("correction", "Q2: Units missing Try: Add cm"),
        ("mark", "7 out of 10 (two slips)"),
    ]
    failed = sections.summarise(
        "create_lesson", json.dumps({"error": "The model timed out."}), ok=False
    )
    assert failed.summary == "This did not work: The model timed out."
