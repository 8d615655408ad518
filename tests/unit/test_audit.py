"""The invariant checker on hand-built documents: a clean conversation passes, and each
kind of violation is found (and only where it applies)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from shared.agent.waiting.results import follow_up_id, result_message_id
from shared.audit import Audit, UserDocuments, Violation, audit, grouped, pending
from shared.ids import task_id_for
from shared.schemas.documents import (
    ActiveRun,
    ArchiveMarker,
    ArchiveSegment,
    ContentPart,
    Conversation,
    FileRef,
    Message,
    TaskState,
    ToolCall,
    ToolCallStatus,
    ToolResult,
)
from shared.schemas.server import RunSlot, TaskLedger, TaskRecord
from shared.tasks.sections import opened

NOW = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)
UID = "alice"
CID = "conv1"
CHECK = Audit(grace=timedelta(seconds=30), live_doc_bytes=262_144, runs_per_user=3, now=NOW)
SETTLED = Audit(
    grace=timedelta(seconds=30), live_doc_bytes=262_144, runs_per_user=3, now=NOW, settled=True
)


def user(text: str = "Hello", mid: str = "u1") -> Message:
    return Message(
        id=mid, role="user", created_at=NOW, status="complete", content=[ContentPart.of_text(text)]
    )


def call_part(
    call_id: str,
    status: ToolCallStatus,
    execution: str = "task",
    name: str = "create_lesson",
    approval: bool | None = None,
) -> ContentPart:
    return ContentPart(
        type="tool_call",
        tool_call=ToolCall(
            id=call_id,
            name=name,
            args_json="{}",
            display_text="Working",
            execution=execution,  # type: ignore[arg-type]
            status=status,
            approval=approval,
        ),
    )


def result_part(call_id: str, status: str = "ok") -> ContentPart:
    return ContentPart(
        type="tool_result",
        tool_result=ToolResult(tool_call_id=call_id, output_json="{}", status=status),  # type: ignore[arg-type]
    )


def assistant(mid: str, *parts: ContentPart, status: str = "complete") -> Message:
    return Message(
        id=mid,
        role="assistant",
        created_at=NOW,
        status=status,  # type: ignore[arg-type]
        content=[ContentPart.of_text("On it."), *parts],
        run_id=f"run-{mid}",
    )


def results(call_id: str, *parts: ContentPart) -> Message:
    return Message(
        id=result_message_id(call_id),
        role="tool",
        created_at=NOW,
        status="complete",
        content=list(parts) or [result_part(call_id)],
    )


def task_state(call_id: str, status: str) -> dict[str, TaskState]:
    return {
        task_id_for(CID, call_id): TaskState(
            status=status,  # type: ignore[arg-type]
            tool="create_lesson",
            tool_call_id=call_id,
            display_text="Creating lesson",
            updated_at=NOW,
        )
    }


def conversation(*messages: Message, **fields: Any) -> Conversation:
    return Conversation(
        id=CID,
        participant_ids=[UID],
        created_at=NOW,
        updated_at=NOW,
        last_message_at=NOW,
        messages=list(messages),
        **fields,
    )


def record(call_id: str, status: str, lease: datetime | None = None, **fields: Any) -> TaskRecord:
    return TaskRecord(
        task_id=task_id_for(CID, call_id),
        conversation_id=CID,
        tool_call_id=call_id,
        tool="create_lesson",
        display_text="Creating lesson",
        seq=0,
        status=status,  # type: ignore[arg-type]
        attempt=1,
        lease_expires_at=lease,
        created_at=NOW,
        updated_at=NOW,
        **{"started": status == "running", **fields},
    )


def ledger(*records: TaskRecord, **fields: Any) -> dict[str, Any]:
    return TaskLedger(tasks={r.task_id: r for r in records}, **fields).to_firestore()


def documents(
    *conversations: Conversation,
    server: dict[str, Any] | None = None,
    archives: dict[str, list[ArchiveSegment]] | None = None,
) -> UserDocuments:
    return UserDocuments(
        UID,
        server,
        {c.id: c.to_firestore() for c in conversations},
        {k: [s.to_firestore() for s in v] for k, v in (archives or {}).items()},
    )


def kinds(found: list[Violation]) -> list[str]:
    return sorted(v.kind for v in found)


def finished_task_conversation() -> tuple[Conversation, dict[str, Any]]:
    """A turn whose task finished and whose follow-up was written."""
    conv = conversation(
        user(),
        assistant("a1", call_part("c1", "complete")),
        results("c1"),
        assistant(follow_up_id("a1")),
        tasks=task_state("c1", "completed"),
    )
    return conv, ledger(record("c1", "completed"))


def running(lease: datetime, status: str = "streaming", run_id: str = "r9") -> ActiveRun:
    return ActiveRun(
        run_id=run_id,
        status=status,  # type: ignore[arg-type]
        assistant_message_id=f"m-{run_id}",
        started_at=NOW - timedelta(minutes=5),
        lease_expires_at=lease,
    )


# -- clean documents pass ---------------------------------------------------------------


def test_audit_passes_a_clean_settled_conversation() -> None:
    conv, server = finished_task_conversation()
    assert audit(documents(conv, server=server), SETTLED) == []
    assert pending(documents(conv, server=server)) == []


def test_audit_passes_calls_waiting_for_a_person_and_a_task_under_way() -> None:
    conv = conversation(
        user(),
        assistant(
            "a1",
            call_part("q1", "pending", execution="question", name="ask_user_question"),
            call_part("d1", "awaiting_approval", execution="inline", approval=True),
            status="waiting",
        ),
        user("Make one", "u2"),
        assistant("a2", call_part("c2", "running")),
        # The end of a run shows the calls waiting on the user as waiting_on_user
        # (shared/agent/run/finish.py): no task holds them, and none needs to.
        tasks={
            **task_state("c2", "running"),
            **task_state("q1", "waiting_on_user"),
            **task_state("d1", "waiting_on_user"),
        },
    )
    server = ledger(record("c2", "running", NOW + timedelta(seconds=60)))
    assert audit(documents(conv, server=server), CHECK) == []


def test_audit_finds_a_task_waiting_on_its_user_that_the_ledger_does_not_hold() -> None:
    conv = conversation(
        user(),
        assistant("a1", call_part("c1", "queued")),
        tasks=task_state("c1", "waiting_on_user"),
    )
    assert "call_without_task" in kinds(audit(documents(conv), CHECK))


def test_audit_passes_a_live_run_within_its_lease_and_grace() -> None:
    conv = conversation(user(), active_run=running(NOW - timedelta(seconds=29)))
    assert audit(documents(conv), CHECK) == []
    assert kinds(pending(documents(conv))) == ["unsettled"]


def test_audit_reads_archived_calls_once_and_skips_a_move_under_way() -> None:
    archived = [user(), assistant("a1", call_part("c1", "complete")), results("c1")]
    segment = ArchiveSegment(conversation_id=CID, segment=1, messages=archived, created_at=NOW)
    # Segment 2 is a move under way: its messages are still live, so it is not counted.
    moving = ArchiveSegment(
        conversation_id=CID, segment=2, messages=[assistant(follow_up_id("a1"))], created_at=NOW
    )
    conv = conversation(
        assistant(follow_up_id("a1")),
        archived=ArchiveMarker(count=3, newest_id=archived[-1].id, segments=1),
        tasks=task_state("c1", "completed"),
    )
    found = audit(
        documents(
            conv, server=ledger(record("c1", "completed")), archives={CID: [segment, moving]}
        ),
        SETTLED,
    )
    assert found == []


# -- each violation ---------------------------------------------------------------------


def test_audit_finds_a_run_past_its_lease_and_grace() -> None:
    for status in ("streaming", "stopping", "queued"):
        conv = conversation(user(), active_run=running(NOW - timedelta(seconds=31), status))
        (found,) = audit(documents(conv), CHECK)
        assert found.kind == "stale_run" and status in found.detail
        assert found.path == f"/{UID}/client/conversations/{CID}"
    # Without a time, leases are not judged.
    assert audit(documents(conv), Audit(timedelta(0), 262_144, 3)) == []


def test_audit_finds_a_ledger_task_running_past_its_lease() -> None:
    conv = conversation(user(), assistant("a1", call_part("c1", "queued")))
    lapsed = record("c1", "running", NOW - timedelta(seconds=31), started=False)
    (found,) = audit(documents(conv, server=ledger(lapsed)), CHECK)
    assert found.kind == "stale_task" and "never started" in found.detail
    assert found.path == f"/{UID}/server"
    fresh = record("c1", "running", NOW - timedelta(seconds=10))
    assert audit(documents(conv, server=ledger(fresh)), CHECK) == []


def test_audit_finds_a_call_handed_to_a_task_the_ledger_does_not_hold() -> None:
    conv = conversation(user(), assistant("a1", call_part("c1", "queued")))
    (missing,) = audit(documents(conv), CHECK)
    assert missing.kind == "call_without_task" and "no ledger record" in missing.detail
    (ended,) = audit(documents(conv, server=ledger(record("c1", "completed"))), CHECK)
    assert ended.kind == "call_without_task" and "completed" in ended.detail
    # An approved call runs as a task too; and a task entry shown as running likewise.
    approved = conversation(
        user(),
        assistant("a1", call_part("d1", "queued", execution="inline", approval=True)),
        tasks=task_state("d1", "queued"),
    )
    assert kinds(audit(documents(approved), CHECK)) == ["call_without_task"] * 2


def test_audit_finds_a_live_task_whose_call_does_not_wait_for_it_once_settled() -> None:
    conv, _ = finished_task_conversation()
    server = ledger(record("c1", "running", NOW + timedelta(seconds=60)))
    assert audit(documents(conv, server=server), CHECK) == []  # a delivery may be on its way
    (found,) = audit(documents(conv, server=server), SETTLED)
    assert found.kind == "task_without_call" and "its call is complete" in found.detail
    gone = ledger(record("zz", "queued"))
    (found,) = audit(documents(conv, server=gone), SETTLED)
    assert found.kind == "task_without_call" and "in no message" in found.detail


def test_audit_finds_a_task_entry_without_its_call() -> None:
    conv, server = finished_task_conversation()
    conv = conv.model_copy(update={"tasks": {**(conv.tasks or {}), **task_state("x", "failed")}})
    (found,) = audit(documents(conv, server=server), SETTLED)
    assert found.kind == "task_entry_without_call" and "names call x" in found.detail


def test_audit_finds_calls_without_exactly_one_result() -> None:
    twice = conversation(
        user(),
        assistant("a1", call_part("c1", "complete")),
        results("c1"),
        results("c1", result_part("c1")).model_copy(update={"id": "again"}),
        assistant(follow_up_id("a1")),
    )
    (found,) = audit(documents(twice), CHECK)
    assert found.kind == "call_results" and "2 results" in found.detail

    never = conversation(user(), assistant("a1", call_part("c1", "error", execution="inline")))
    (found,) = audit(documents(never), CHECK)
    assert found.kind == "call_results" and "has no result" in found.detail

    orphan = conversation(user(), results("ghost"))
    (found,) = audit(documents(orphan), CHECK)
    assert found.kind == "call_results" and "nowhere" in found.detail

    # A question still pending after its run ended without waiting has no result: flagged.
    dropped = conversation(
        user(),
        assistant("a1", call_part("q1", "pending", execution="question"), status="complete"),
    )
    assert kinds(audit(documents(dropped), CHECK)) == ["call_results"]


def test_audit_finds_a_handed_off_call_still_without_result_once_settled() -> None:
    conv = conversation(
        user(), assistant("a1", call_part("c1", "queued")), tasks=task_state("c1", "queued")
    )
    server = ledger(record("c1", "queued"))
    assert audit(documents(conv, server=server), CHECK) == []
    found = audit(documents(conv, server=server), SETTLED)
    assert kinds(found) == ["call_results"]
    assert "still queued, no result" in found[0].detail


def test_audit_finds_a_call_status_that_disagrees_with_its_result() -> None:
    conv = conversation(
        user(),
        assistant("a1", call_part("c1", "running")),
        results("c1"),
        assistant(follow_up_id("a1")),
        tasks=task_state("c1", "completed"),
    )
    found = audit(documents(conv, server=ledger(record("c1", "running", NOW))), CHECK)
    assert kinds(found) == ["call_status"]


def test_audit_finds_a_step_whose_results_are_in_without_its_follow_up() -> None:
    conv = conversation(
        user(),
        assistant("a1", call_part("c1", "complete")),
        results("c1"),
        tasks=task_state("c1", "completed"),
    )
    server = ledger(record("c1", "completed"))
    assert audit(documents(conv, server=server), CHECK) == []
    (found,) = audit(documents(conv, server=server), SETTLED)
    assert found.kind == "missing_follow_up" and "a1" in found.detail
    # A follow-up being written is not missing; one the user stopped is not wanted.
    writing = conv.model_copy(
        update={
            "active_run": running(NOW + timedelta(seconds=60)).model_copy(
                update={"assistant_message_id": follow_up_id("a1")}
            )
        }
    )
    assert audit(documents(writing, server=server), SETTLED) == []
    stopped = conv.model_copy(
        update={
            "tasks": {
                k: v.model_copy(update={"follow_up": False})
                for k, v in task_state("c1", "completed").items()
            }
        }
    )
    assert audit(documents(stopped, server=server), SETTLED) == []


def test_audit_finds_queued_messages_with_no_run_to_take_them() -> None:
    conv = conversation(user(), assistant("a1"), queued_messages=[user("Next", "u2")])
    (found,) = audit(documents(conv), CHECK)
    assert found.kind == "stuck_queue"
    busy = conv.model_copy(update={"active_run": running(NOW + timedelta(seconds=60))})
    assert audit(documents(busy), CHECK) == []


def test_audit_finds_a_settled_document_over_the_live_budget_with_older_messages() -> None:
    big = conversation(user("x" * 20_000), assistant("a1"), user("y"), assistant("a2"))
    small = Audit(
        timedelta(0), live_doc_bytes=16_384, runs_per_user=3, history_messages=2, settled=True
    )
    (found,) = audit(documents(big), small)
    assert found.kind == "oversize" and "over the budget of 16384" in found.detail
    assert audit(documents(big), CHECK) == []


def test_audit_lets_the_models_window_stay_live_over_the_budget() -> None:
    # Roll-over never moves the newest history_messages: large recent messages may keep
    # the live document over its budget (never over Firestore's limit).
    big = conversation(user("x" * 20_000), assistant("a1"))
    window = Audit(
        timedelta(0), live_doc_bytes=16_384, runs_per_user=3, history_messages=2, settled=True
    )
    assert audit(documents(big), window) == []


def test_audit_finds_more_replies_at_once_than_the_user_may_have() -> None:
    convs = [
        conversation(
            user(), active_run=running(NOW + timedelta(seconds=60), run_id=f"r{n}")
        ).model_copy(update={"id": f"conv{n}"})
        for n in range(3)
    ]
    one = Audit(timedelta(0), 262_144, runs_per_user=2, now=NOW)
    (found,) = audit(documents(*convs), one)
    assert found.kind == "over_run_limit" and "3 replies" in found.detail
    assert audit(documents(*convs), CHECK) == []


def test_audit_finds_a_run_slot_still_held_once_settled() -> None:
    conv, _ = finished_task_conversation()
    slot = RunSlot(run_id="r1", until=NOW + timedelta(minutes=5))
    server = ledger(record("c1", "completed"), runs={CID: slot})
    assert audit(documents(conv, server=server), CHECK) == []
    (found,) = audit(documents(conv, server=server), SETTLED)
    assert found.kind == "leaked_slot"
    lapsed = ledger(record("c1", "completed"), runs={CID: slot.model_copy(update={"until": NOW})})
    assert audit(documents(conv, server=lapsed), SETTLED) == []


def test_audit_reports_a_document_it_cannot_read() -> None:
    broken = UserDocuments(UID, {"tasks": {"t": {"status": "nonsense"}}}, {CID: {"id": CID}})
    found = audit(broken, CHECK)
    assert kinds(found) == ["invalid_document", "invalid_document"]
    assert grouped(found)["invalid_document"][0].path == f"/{UID}/client/conversations/{CID}"


# -- task sections agree with the ledger --------------------------------------------------


def _section(status: str) -> dict[str, Any]:
    made = opened(record("c1", "queued"), NOW).model_copy(update={"status": status})
    return made.to_firestore()


def _with_sections(server: dict[str, Any], status: str | None = None) -> UserDocuments:
    conv, _ = finished_task_conversation()
    task_id = task_id_for(conv.id, "c1")
    base = documents(conv, server=server)
    return UserDocuments(
        base.user_id,
        base.ledger,
        base.conversations,
        base.archives,
        {} if status is None else {task_id: _section(status)},
    )


def test_audit_passes_a_section_that_agrees_with_its_ledger_record() -> None:
    _, server = finished_task_conversation()
    assert audit(_with_sections(server, "completed"), SETTLED) == []


def test_audit_flags_a_section_finished_unlike_its_ledger_record() -> None:
    _, server = finished_task_conversation()
    found = audit(_with_sections(server, "failed"), CHECK)
    assert kinds(found) == ["section_disagrees"]
    assert "section is failed; ledger says completed" in found[0].detail


def test_audit_flags_a_section_left_behind_and_one_missing_at_any_moment() -> None:
    # Written in the same write as the record: no write is still to come.
    _, server = finished_task_conversation()
    assert kinds(audit(_with_sections(server, "running"), CHECK)) == ["section_disagrees"]
    assert kinds(audit(_with_sections(server, "running"), SETTLED)) == ["section_disagrees"]
    assert kinds(audit(_with_sections(server), CHECK)) == ["section_disagrees"]


def test_audit_finds_a_user_message_with_no_words() -> None:
    clip = ContentPart(
        type="file",
        file=FileRef(storage_path="u/uploads/a.webm", content_type="audio/webm", size_bytes=9),
    )
    blank = user("  ").model_copy(update={"content": [clip]})
    (found,) = audit(documents(conversation(blank, assistant("a1"))), CHECK)
    assert found.kind == "blank_user_message" and "u1" in found.detail
    queued = conversation(
        user(), assistant("a1"), queued_messages=[user(" ", "u2")], active_run=running(NOW)
    )
    assert kinds(audit(documents(queued), CHECK)) == ["blank_user_message"]
    assert audit(documents(conversation(user(), assistant("a1"))), CHECK) == []
