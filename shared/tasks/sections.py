"""Pure changes to a task's section (``/{uid}/client/tasks/{taskId}``, ``TaskDocument``).

A section follows its task from queued to finished. Its status moves only as
``TRANSITIONS`` allows (an illegal move raises ``IllegalTransition``: a bug); terminal
states are final. Progress steps append, bounded, and idempotently: a step is keyed by
(attempt, step), so a redelivered attempt adds nothing twice, and a retried attempt
repeating the steps an earlier one recorded continues after them. Summary and key
outputs are set in the same change as the terminal status. Like ``ledger.py``, every
function may run more than once (on contention) and has no side effects.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.errors import IllegalTransition
from shared.schemas.documents import KeyOutput, TaskDocument, TaskStatus, TaskUpdate
from shared.schemas.server import TaskRecord
from shared.store.base import SectionChange

log = logging.getLogger(__name__)

TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"waiting_on_user", "completed", "failed", "cancelled"}),
    "waiting_on_user": frozenset({"running", "completed", "failed", "cancelled"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}
"""Where each status may go next: the one table the server enforces."""

TERMINAL: frozenset[TaskStatus] = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)

# Steps a section keeps; older ones fold into one "… N earlier steps" line. 40 steps of
# at most 280 characters keep a section under ~20 KB whatever the task does.
MAX_UPDATES = 40
MAX_TEXT = 280
MAX_DESCRIPTION = 500
MAX_OUTPUTS = 30

NOT_APPROVED = "Not approved."
"""The ledger's error for a task delivered before its approval landed: the approval
queues it anew, so its section is left as it was (still queued)."""


@dataclass(frozen=True, slots=True)
class Step:
    """A progress step a tool reported: the ``step``-th of ``attempt``."""

    attempt: int
    step: int
    text: str
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Ending:
    """What a finished task leaves readable: a summary and its key outputs."""

    summary: str
    key_outputs: tuple[KeyOutput, ...] = field(default_factory=tuple)


def opened(record: TaskRecord, now: datetime) -> TaskDocument:
    """The section of a task just submitted (queued)."""
    return TaskDocument(
        id=record.task_id,
        conversation_id=record.conversation_id,
        tool_call_id=record.tool_call_id,
        tool=record.tool,
        title=record.display_text,
        status="queued",
        created_at=record.created_at,
        updated_at=now,
    )


def move(section: TaskDocument, status: TaskStatus, now: datetime) -> TaskDocument:
    """The section in ``status`` (unchanged if already there).

    Raises:
        IllegalTransition: ``TRANSITIONS`` does not allow the move.
    """
    if section.status == status:
        return section
    if status not in TRANSITIONS[section.status]:
        raise IllegalTransition(f"task {section.id}: {section.status} cannot become {status}")
    update: dict[str, Any] = {"status": status, "updated_at": now}
    if status == "running" and section.started_at is None:
        update["started_at"] = now
    if status in TERMINAL:
        update["ended_at"] = now
    if status != "waiting_on_user":
        update["question"] = None
    return section.model_copy(update=update)


def started(section: TaskDocument | None, now: datetime) -> TaskDocument | None:
    """The section running (a handler started, or continued, the tool); a finished or
    missing one is left alone."""
    if section is None or section.status in TERMINAL:
        return None
    return move(section, "running", now)


def waiting(section: TaskDocument, question: str, now: datetime) -> TaskDocument:
    """The section waiting for the user to answer ``question``."""
    moved = move(section, "waiting_on_user", now)
    return moved.model_copy(update={"question": question[:MAX_DESCRIPTION]})


def ended(
    section: TaskDocument, status: TaskStatus, now: datetime, ending: Ending | None
) -> TaskDocument:
    """The section finished as ``status`` with its summary, in one change. A section
    still queued passes through ``running`` on its way to ``completed`` (its start was
    not recorded: the write that showed it failed)."""
    if section.status in TERMINAL:
        return move(section, status, now)  # the same status: unchanged; another: raises
    if section.status == "queued" and status == "completed":
        section = move(section, "running", now)
    finished = move(section, status, now)
    if ending is None:
        return finished
    return finished.model_copy(
        update={
            "summary": ending.summary[:MAX_DESCRIPTION],
            "key_outputs": list(ending.key_outputs[:MAX_OUTPUTS]) or None,
        }
    )


def _known(section: TaskDocument, step: Step) -> bool:
    for update in section.updates:
        if update.attempt == step.attempt and update.step >= step.step:
            return True  # this attempt got this far already: a redelivery
        if update.attempt < step.attempt and update.step == step.step and update.text == step.text:
            return True  # an earlier attempt recorded it: the retry continues after it
    return False


def with_steps(section: TaskDocument, steps: Sequence[Step], now: datetime) -> TaskDocument:
    """The section with ``steps`` appended in order, each once (a finished section
    takes no more), the oldest folded into one line past ``MAX_UPDATES``."""
    if section.status in TERMINAL:
        return section
    updates = list(section.updates)
    last = updates[-1].seq if updates else 0
    current = section
    for step in steps:
        if _known(current, step):
            continue
        last += 1
        updates.append(
            TaskUpdate(
                seq=last,
                at=now,
                text=step.text[:MAX_TEXT],
                description=(step.description or None) and step.description[:MAX_DESCRIPTION],
                attempt=step.attempt,
                step=step.step,
            )
        )
        current = section.model_copy(update={"updates": updates})
    if current is section:
        return section
    return section.model_copy(update={"updates": _folded(updates), "updated_at": now})


def _folded(updates: list[TaskUpdate]) -> list[TaskUpdate]:
    if len(updates) <= MAX_UPDATES:
        return updates
    cut = len(updates) - (MAX_UPDATES - 1)
    dropped = updates[:cut]
    count = sum(u.folded or 1 for u in dropped)
    newest = dropped[-1]
    line = newest.model_copy(
        update={"text": f"… {count} earlier steps", "description": None, "folded": count}
    )
    return [line, *updates[cut:]]


def follow(
    section: TaskDocument | None,
    record: TaskRecord,
    now: datetime,
    ending: Ending | None = None,
    question: str | None = None,
) -> TaskDocument | None:
    """The section brought in line with its ledger record (``None``: nothing to write).

    A new live record opens the section; a finished one ends it (with ``ending``, or
    the record's error told plainly); one waiting on its user shows ``question``. A
    granted attempt changes nothing: the section shows ``running`` once a handler
    starts the tool (``started``), which only the handler knows.
    """
    if section is None:
        return opened(record, now) if record.status in ("queued", "running") else None
    if record.status == "waiting_on_user":
        if question is None or section.status in TERMINAL:
            return None
        # (a section still queued: the write that showed the tool start failed)
        return waiting(started(section, now) or section, question, now)
    if record.status not in TERMINAL or section.status in TERMINAL:
        return None
    if record.status == "cancelled" and record.error == NOT_APPROVED:
        return None
    if ending is None:
        ending = cancelled(record.error) if record.status == "cancelled" else failure(record.error)
    return ended(section, record.status, now, ending)


# -- what a finished task leaves readable -----------------------------------------------


def failure(error: str | None) -> Ending:
    """A failure in plain UK English, and what to try."""
    why = (error or "it stopped without saying why").rstrip(".")
    return Ending(
        f"This did not work: {why}.",
        (
            KeyOutput(
                kind="try",
                text="Try again in a few minutes; if it fails again, "
                "ask Spark AI Agent to do it in smaller steps.",
            ),
        ),
    )


def cancelled(error: str | None) -> Ending:
    return Ending(error or "Cancelled before it finished.")


def _lesson(item: dict[str, Any]) -> KeyOutput:
    return KeyOutput(
        kind="lesson",
        text=str(item.get("title") or "Untitled lesson"),
        document_id=item.get("documentId"),
        outline=[str(o) for o in item.get("outline") or []][:MAX_OUTPUTS] or None,
    )


def summarise(tool: str, output_json: str, ok: bool) -> Ending:
    """The summary and key outputs of a task from its tool's output."""
    try:
        output = json.loads(output_json)
    except ValueError:
        output = {}
    if not isinstance(output, dict):
        output = {}
    if not ok or "error" in output:
        return failure(str(output.get("error") or "the tool failed"))
    if tool == "create_lesson":
        lesson = _lesson(output)
        return Ending(f"Created the lesson “{lesson.text}”.", (lesson,))
    if tool == "plan_lessons":
        lessons = [_lesson(item) for item in output.get("lessons") or [] if isinstance(item, dict)]
        planned = [o.model_copy(update={"kind": "planned_lesson"}) for o in lessons]
        return Ending(f"Planned and wrote {len(planned)} lessons.", tuple(planned))
    if tool == "review_work":
        return _review(output)
    return Ending("Done.")


def _review(output: dict[str, Any]) -> Ending:
    name = str(output.get("name") or "the work")
    if output.get("status") == "needs_answer":
        return Ending(f"Needed an answer from you before reviewing {name}.")
    feedback = output.get("feedback") or {}
    outputs = [KeyOutput(kind="strength", text=str(s)) for s in feedback.get("strengths") or []]
    outputs += [
        KeyOutput(kind="correction", text=_correction(c))
        for c in feedback.get("corrections") or []
        if isinstance(c, dict)
    ]
    mark = feedback.get("mark")
    if isinstance(mark, dict):
        reason = f" ({mark['reason']})" if mark.get("reason") else ""
        outputs.append(
            KeyOutput(kind="mark", text=f"{mark.get('score')} out of {mark.get('outOf')}{reason}")
        )
    summary = str(feedback.get("summary") or f"Reviewed {name}.")
    return Ending(summary, tuple(outputs))


def _correction(correction: dict[str, Any]) -> str:
    where = f"{correction['where']}: " if correction.get("where") else ""
    fix = f" Try: {correction['suggestion']}" if correction.get("suggestion") else ""
    return f"{where}{correction.get('issue', '')}{fix}"[:MAX_DESCRIPTION]


def following(
    record: TaskRecord, now: datetime, ending: Ending | None, question: str | None
) -> SectionChange:
    """The change that brings a section in line with its ledger record (``follow``)."""

    def change(section: TaskDocument | None) -> TaskDocument | None:
        try:
            return follow(section, record, now, ending, question)
        except IllegalTransition:
            # A bug in a view: the ledger, which decides, is written all the same.
            log.exception("task %s: its section cannot follow its record", record.task_id)
            return None

    return change
