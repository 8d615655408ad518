"""The invariants of a user's stored state: what must hold across every process, checked
on the documents alone (pure; ``tools/audit.py`` reads them from Firestore).

Three tiers, because a live system is legitimately between steps:

* **always**: true after every completed write, whatever is still queued (a call shown
  as handed to a task has its live ledger record, every call has at most one result,
  a finished call has its result, no queue without a run, no document over budget, no
  more replies streaming at once than the user's limit);
* **in time** (``Audit.now``): nothing still streaming or running past its lease plus
  the watchdog's grace;
* **settled** (``Audit.settled``): once every due task has been delivered, nothing
  waits: every live ledger task belongs to a call that waits for it, every handed-off
  call has its result, every step whose results are in has its follow-up, and no run
  slot is still held.

A violation names the document (``path``) and says what is wrong (``detail``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from shared.agent.results import follow_up_id, waiting_on_person, wants_follow_up
from shared.config import Settings
from shared.queue.naming import task_id_for
from shared.schemas.documents import (
    ArchiveSegment,
    Conversation,
    Message,
    TaskDocument,
    ToolCall,
)
from shared.schemas.server import TaskLedger
from shared.store.archive import plan
from shared.store.limits import MAX_DOCUMENT_BYTES
from shared.store.patch import Sizes, stored_size
from shared.tasks.sections import NOT_APPROVED, TERMINAL

Kind = Literal[
    "invalid_document",
    "stale_run",
    "stale_task",
    "call_without_task",
    "task_without_call",
    "task_entry_without_call",
    "call_results",
    "call_status",
    "missing_follow_up",
    "stuck_queue",
    "oversize",
    "over_run_limit",
    # A family's members each read one mirror that matches it (shared/families/audit.py).
    "family_mirror",
    # Every copy of a message between family members is the same in each subtree.
    "shared_copy",
    # A user's settings mirror says what the server-only truth says (preferences.py).
    "settings_mirror",
    # A user's lesson progress summary says what their lessons say (lessons/progress.py).
    "lesson_progress",
    # Seen by the stateful test, which watches calls and deliveries (documents cannot
    # say): a model call that began once the user's tokens for the day were spent, and
    # a task delivery acknowledged while its attempt had not started (it was dropped).
    "over_budget",
    "dropped_task",
    "leaked_slot",
    "unsettled",
    "section_disagrees",
    # A user's message with no words: a voice clip is refused when nothing is heard.
    "blank_user_message",
]

# A task in these states has not ended (one waiting on its user holds no slot, and waits
# for a person, not for work: ``pending`` does not count it).
LIVE = ("queued", "running", "waiting_on_user")
WORKING = ("queued", "running")
# Calls in these states were handed to a task (a task tool, or an approved call).
HANDED = ("queued", "running")


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: ``kind``, whose, which document, and what is wrong."""

    kind: Kind
    user_id: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Audit:
    """What to check. ``now`` enables the lease checks (a run or task past its lease plus
    ``grace``); ``settled`` the checks that hold only once every due task was delivered."""

    grace: timedelta
    live_doc_bytes: int
    runs_per_user: int
    history_messages: int = 20
    now: datetime | None = None
    settled: bool = False

    @classmethod
    def of(cls, settings: Settings, now: datetime | None = None, settled: bool = False) -> Audit:
        return cls(
            grace=timedelta(seconds=settings.watchdog_grace_seconds),
            live_doc_bytes=settings.live_doc_bytes,
            runs_per_user=settings.runs_per_user,
            history_messages=settings.history_messages,
            now=now,
            settled=settled,
        )


@dataclass(frozen=True, slots=True)
class UserDocuments:
    """A user's documents as stored (camelCase dicts, as Firestore returns them): the
    ledger (``/{uid}/server``, ``None`` if absent), conversations by id, and each
    conversation's archive segments, and the task sections by task id (``None``: not
    read, so not checked)."""

    user_id: str
    ledger: Mapping[str, Any] | None = None
    conversations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    archives: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    tasks: Mapping[str, Mapping[str, Any]] | None = None


def ledger_path(user_id: str) -> str:
    return f"/{user_id}/server"


def task_path(user_id: str, task_id: str) -> str:
    return f"/{user_id}/client/tasks/{task_id}"


def conversation_path(user_id: str, conversation_id: str) -> str:
    return f"/{user_id}/client/conversations/{conversation_id}"


@dataclass(frozen=True, slots=True)
class _Site:
    """A tool call and the message holding it, wherever it is stored."""

    call: ToolCall
    message: Message
    where: str


@dataclass
class _Whole:
    """One conversation with its archive: every message once, in order."""

    live: Conversation
    path: str
    messages: list[Message]

    def as_conversation(self) -> Conversation:
        return self.live.model_copy(update={"messages": self.messages})

    def sites(self) -> Iterable[_Site]:
        archived = len(self.messages) - len(self.live.messages)
        for index, message in enumerate(self.messages):
            where = f"archive, message {index}" if index < archived else message.id
            for part in message.content:
                if part.tool_call is not None:
                    yield _Site(part.tool_call, message, where)

    def results(self) -> Counter[str]:
        return Counter(
            part.tool_result.tool_call_id
            for message in self.messages
            for part in message.content
            if part.tool_result is not None
        )


class _Checker:
    def __init__(self, documents: UserDocuments, audit: Audit) -> None:
        self.user_id = documents.user_id
        self.audit = audit
        self.found: list[Violation] = []
        self.documents = documents

    def flag(self, kind: Kind, path: str, detail: str) -> None:
        self.found.append(Violation(kind, self.user_id, path, detail))

    def parse(self, model: type[BaseModel], raw: Mapping[str, Any], path: str) -> Any:
        try:
            return model.model_validate(dict(raw))
        except ValidationError as exc:
            self.flag("invalid_document", path, f"not a valid {model.__name__}: {exc}")
            return None

    def run(self) -> list[Violation]:
        documents, uid = self.documents, self.user_id
        ledger: TaskLedger | None = None
        if documents.ledger is not None:
            ledger = self.parse(TaskLedger, documents.ledger, ledger_path(uid))
            self.sized(documents.ledger, ledger_path(uid), MAX_DOCUMENT_BYTES)
        wholes: dict[str, _Whole] = {}
        for conversation_id, raw in documents.conversations.items():
            path = conversation_path(uid, conversation_id)
            size = self.sized(raw, path, MAX_DOCUMENT_BYTES)
            conversation = self.parse(Conversation, raw, path)
            if conversation is not None:
                self.rolled_over(conversation, size, path)
                segments = documents.archives.get(conversation_id, ())
                wholes[conversation_id] = self.whole(conversation, segments, path)
        for whole in wholes.values():
            self.conversation(whole, ledger)
        self.run_limit(wholes)
        if ledger is not None:
            self.ledger(ledger, wholes)
        if documents.tasks is not None:
            self.sections(documents.tasks, ledger)
        return self.found

    def sized(self, raw: Mapping[str, Any], path: str, budget: int) -> int:
        """The document's size as Firestore counts it, flagged if over ``budget``."""
        size = Sizes.of(dict(raw)).total
        if size > budget:
            self.flag("oversize", path, f"{size} bytes, over the budget of {budget}")
        return size

    def rolled_over(self, conversation: Conversation, size: int, path: str) -> None:
        """Over its live budget, a settled conversation has nothing left to roll over:
        roll-over keeps the newest ``history_messages`` (the model's window) and calls
        still waiting live whatever their size, so only what it could move counts."""
        if not self.audit.settled or size <= self.audit.live_doc_bytes:
            return
        movable = plan(conversation, self.audit.live_doc_bytes, self.audit.history_messages)
        if movable:
            self.flag(
                "oversize",
                path,
                f"{size} bytes, over the budget of {self.audit.live_doc_bytes}, with "
                f"{len(movable)} older messages roll-over should have moved",
            )

    def whole(
        self, conversation: Conversation, raw_segments: Sequence[Mapping[str, Any]], path: str
    ) -> _Whole:
        marker = conversation.archived
        counted = marker.segments if marker is not None else 0
        older: list[Message] = []
        for raw in raw_segments:
            number = raw.get("segment")
            where = f"{path}/archive/{number:06d}" if isinstance(number, int) else path
            size = stored_size(dict(raw))
            if size > MAX_DOCUMENT_BYTES:
                self.flag("oversize", where, f"{size} bytes, over Firestore's limit")
            segment: ArchiveSegment | None = self.parse(ArchiveSegment, raw, where)
            # A segment past the marker is a move under way: its messages are still live.
            if segment is not None and segment.segment <= counted:
                older.extend(segment.messages)
        return _Whole(conversation, path, [*older, *conversation.messages])

    # -- one conversation ---------------------------------------------------------------

    def conversation(self, whole: _Whole, ledger: TaskLedger | None) -> None:
        conversation, path = whole.live, whole.path
        run = conversation.active_run
        if conversation.queued_messages and run is None:
            self.flag(
                "stuck_queue",
                path,
                f"{len(conversation.queued_messages)} queued message(s) and no run to take them",
            )
        now = self.audit.now
        if run is not None and now is not None and run.lease_expires_at + self.audit.grace < now:
            lapsed = (now - run.lease_expires_at).total_seconds()
            self.flag(
                "stale_run",
                path,
                f"run {run.run_id} is {run.status}, its lease lapsed {lapsed:.0f} s ago",
            )
        for message in [*conversation.messages, *(conversation.queued_messages or [])]:
            if message.role == "user" and not message.text.strip():
                self.flag("blank_user_message", path, f"user message {message.id} has no text")
        self.calls(whole, ledger)
        self.task_entries(whole, ledger)
        if self.audit.settled:
            self.follow_ups(whole)

    def calls(self, whole: _Whole, ledger: TaskLedger | None) -> None:
        conversation, path = whole.live, whole.path
        results = whole.results()
        tasks = ledger.tasks if ledger is not None else {}
        seen: set[str] = set()
        for site in whole.sites():
            call, count = site.call, results[site.call.id]
            seen.add(call.id)
            where = f"call {call.id} ({call.name}) in {site.where}"
            if count > 1:
                self.flag("call_results", path, f"{where} has {count} results")
            if call.status in HANDED:
                record = tasks.get(task_id_for(conversation.id, call.id))
                if record is None or record.status not in LIVE:
                    state = "no ledger record" if record is None else f"ledger says {record.status}"
                    self.flag("call_without_task", path, f"{where} is {call.status}; {state}")
                if count:
                    self.flag("call_status", path, f"{where} has its result but is {call.status}")
                elif self.audit.settled and (record is None or record.status in WORKING):
                    self.flag("call_results", path, f"{where} is still {call.status}, no result")
            elif count == 0 and not (site.message.status == "waiting" and waiting_on_person(call)):
                self.flag("call_results", path, f"{where} is {call.status} and has no result")
            elif count and waiting_on_person(call):
                self.flag("call_status", path, f"{where} has its result but is {call.status}")
        for call_id in results.keys() - seen:
            self.flag("call_results", path, f"a result for call {call_id}, which is nowhere")

    def task_entries(self, whole: _Whole, ledger: TaskLedger | None) -> None:
        conversation, path = whole.live, whole.path
        calls = {site.call.id: site.call for site in whole.sites()}
        tasks = ledger.tasks if ledger is not None else {}
        for task_id, state in (conversation.tasks or {}).items():
            call = calls.get(state.tool_call_id)
            if call is not None and task_id not in tasks and waiting_on_person(call):
                continue  # an inline call waiting on its person shows waiting_on_user too
            if call is None:
                self.flag(
                    "task_entry_without_call",
                    path,
                    f"tasks.{task_id} ({state.tool}, {state.status}) names call "
                    f"{state.tool_call_id}, which is in no message",
                )
            if state.status in LIVE:
                record = tasks.get(task_id)
                if record is None or record.status not in LIVE:
                    said = "no ledger record" if record is None else f"ledger says {record.status}"
                    self.flag(
                        "call_without_task",
                        path,
                        f"tasks.{task_id} ({state.tool}) shows {state.status}; {said}",
                    )

    def follow_ups(self, whole: _Whole) -> None:
        conversation = whole.as_conversation()
        run = conversation.active_run
        for message in conversation.messages:
            if message.role != "assistant" or not _hands_off(message):
                continue
            wanted = follow_up_id(message.id)
            if not wants_follow_up(conversation, message) or conversation.message(wanted):
                continue
            if run is not None and run.assistant_message_id == wanted:
                continue
            self.flag(
                "missing_follow_up",
                whole.path,
                f"every call of message {message.id} has its result, and no follow-up "
                f"({wanted}) was written",
            )

    def run_limit(self, wholes: Mapping[str, _Whole]) -> None:
        now = self.audit.now
        streaming = sorted(
            cid
            for cid, whole in wholes.items()
            if (run := whole.live.active_run) is not None
            and run.status in ("streaming", "stopping")
            and (now is None or run.lease_expires_at > now)
        )
        if len(streaming) > self.audit.runs_per_user:
            self.flag(
                "over_run_limit",
                f"/{self.user_id}",
                f"{len(streaming)} replies being written at once (limit "
                f"{self.audit.runs_per_user}): {', '.join(streaming)}",
            )

    # -- the ledger ---------------------------------------------------------------------

    def ledger(self, ledger: TaskLedger, wholes: Mapping[str, _Whole]) -> None:
        path, now, grace = ledger_path(self.user_id), self.audit.now, self.audit.grace
        for task_id, record in ledger.tasks.items():
            name = f"task {task_id} ({record.tool}, attempt {record.attempt})"
            lease = record.lease_expires_at
            if (
                record.status == "running"
                and now is not None
                and (lease is None or lease + grace < now)
            ):
                lapsed = (
                    "has no lease"
                    if lease is None
                    else (f"its lease lapsed {(now - lease).total_seconds():.0f} s ago")
                )
                started = "started" if record.started else "never started"
                self.flag("stale_task", path, f"{name} is running ({started}) and {lapsed}")
            if self.audit.settled and record.status in LIVE:
                self.task_call(name, record.conversation_id, record.tool_call_id, wholes)
        if self.audit.settled:
            for conversation_id, slot in ledger.runs.items():
                if now is None or slot.until > now:
                    self.flag(
                        "leaked_slot",
                        path,
                        f"run {slot.run_id} of conversation {conversation_id} still holds a "
                        "run slot with nothing running",
                    )

    def task_call(
        self, name: str, conversation_id: str, call_id: str, wholes: Mapping[str, _Whole]
    ) -> None:
        path = ledger_path(self.user_id)
        whole = wholes.get(conversation_id)
        if whole is None:
            self.flag("task_without_call", path, f"{name} is live; conversation is gone")
            return
        site = next((s for s in whole.sites() if s.call.id == call_id), None)
        if site is None:
            self.flag("task_without_call", path, f"{name} is live; its call is in no message")
        elif site.call.status not in HANDED:
            self.flag(
                "task_without_call",
                path,
                f"{name} is live; its call is {site.call.status}",
            )

    # -- task sections --------------------------------------------------------------------

    def sections(self, raw: Mapping[str, Mapping[str, Any]], ledger: TaskLedger | None) -> None:
        """A section moves in the same write as its ledger record when the record is
        made, ends or waits (``TaskLedgerStore.apply_with_sections``), so at any moment
        it exists beside its record and has ended exactly as its record did; it may only
        lag in showing a start (``running``, written by the handler as the tool starts).
        A section whose record was pruned (50 finished kept) stands alone, still
        readable. A task found unapproved leaves its section as it was (queued)."""
        records = ledger.tasks if ledger is not None else {}
        for task_id, stored in raw.items():
            path = task_path(self.user_id, task_id)
            section: TaskDocument | None = self.parse(TaskDocument, stored, path)
            record = records.get(task_id)
            if section is None or record is None:
                continue
            shown, decided = section.status, record.status
            unapproved = decided == "cancelled" and record.error == NOT_APPROVED
            if shown in TERMINAL and shown != decided:
                self.flag("section_disagrees", path, f"section is {shown}; ledger says {decided}")
            elif decided == "queued" and shown not in ("queued", "waiting_on_user"):
                # (an answer queues a waiting task again; it shows running once it starts)
                self.flag("section_disagrees", path, f"section is {shown}; ledger says queued")
            elif decided in TERMINAL and shown != decided and not unapproved:
                self.flag("section_disagrees", path, f"section is {shown}; ledger says {decided}")
        for task_id, record in records.items():
            unapproved = record.status == "cancelled" and record.error == NOT_APPROVED
            if task_id not in raw and not unapproved:
                self.flag(
                    "section_disagrees",
                    task_path(self.user_id, task_id),
                    f"ledger has task {task_id} ({record.status}); it has no section",
                )


def _hands_off(message: Message) -> bool:
    """The message ended its step with calls answered elsewhere (a task, a person): the
    agent goes on in a follow-up once they are all in."""
    inline = {p.tool_result.tool_call_id for p in message.content if p.tool_result is not None}
    return any(p.tool_call is not None and p.tool_call.id not in inline for p in message.content)


def audit(documents: UserDocuments, check: Audit) -> list[Violation]:
    """Every invariant ``check`` asks for that ``documents`` break."""
    return _Checker(documents, check).run()


def pending(documents: UserDocuments) -> list[Violation]:
    """Work still going on (runs active, ledger tasks live), as ``unsettled`` violations:
    an empty list means the user's documents have settled."""
    uid, found = documents.user_id, []
    for conversation_id, raw in documents.conversations.items():
        run = raw.get("activeRun")
        if isinstance(run, Mapping):
            found.append(
                Violation(
                    "unsettled",
                    uid,
                    conversation_path(uid, conversation_id),
                    f"run {run.get('runId')} is still {run.get('status')}",
                )
            )
    tasks = (documents.ledger or {}).get("tasks") or {}
    for task_id, record in tasks.items():
        if isinstance(record, Mapping) and record.get("status") in WORKING:
            found.append(
                Violation(
                    "unsettled",
                    uid,
                    ledger_path(uid),
                    f"task {task_id} ({record.get('tool')}) is still {record.get('status')}",
                )
            )
    return found


def grouped(violations: Iterable[Violation]) -> dict[str, list[Violation]]:
    """Violations by kind, kinds in alphabetical order."""
    by_kind: dict[str, list[Violation]] = {}
    for violation in sorted(violations, key=lambda v: (v.kind, v.user_id, v.path)):
        by_kind.setdefault(violation.kind, []).append(violation)
    return by_kind


SHARED_KINDS = ("direct", "family")


def _stored_messages(documents: UserDocuments, conversation_id: str) -> list[Mapping[str, Any]]:
    """A conversation's messages as stored: the archive segments its marker counts,
    then the live ones."""
    live = documents.conversations[conversation_id]
    marker = live.get("archived") or {}
    counted = int(marker.get("segments", 0)) if isinstance(marker, Mapping) else 0
    segments = list(documents.archives.get(conversation_id, []))[:counted]
    archived = [m for s in segments for m in s.get("messages", [])]
    return [*archived, *live.get("messages", [])]


def shared_copies(users: Iterable[UserDocuments]) -> list[Violation]:
    """Every message of a ``direct`` or ``family`` conversation is identical in each
    member's copy that holds it (compared field for field, as stored), and held once
    in each; a copy whose other copies were not read is compared with none."""
    seen: dict[tuple[str, str], tuple[str, Mapping[str, Any]]] = {}
    found: list[Violation] = []
    for documents in users:
        uid = documents.user_id
        for conversation_id, live in documents.conversations.items():
            if live.get("kind") not in SHARED_KINDS:
                continue
            path = conversation_path(uid, conversation_id)
            ids: Counter[str] = Counter()
            for message in _stored_messages(documents, conversation_id):
                message_id = str(message.get("id"))
                ids[message_id] += 1
                first = seen.setdefault((conversation_id, message_id), (uid, message))
                if first[1] != message:
                    found.append(
                        Violation(
                            "shared_copy",
                            uid,
                            path,
                            f"message {message_id} differs from {first[0]}'s copy",
                        )
                    )
            for message_id, count in ids.items():
                if count > 1:
                    found.append(
                        Violation(
                            "shared_copy", uid, path, f"message {message_id} is held {count} times"
                        )
                    )
    return found
