"""The checks of one user's documents: each conversation with its archive, its calls,
results and follow-ups, the ledger's tasks and run slots, and the task sections."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from shared.agent import follow_up_id, waiting_on_person, wants_follow_up
from shared.audit.violations import (
    HANDED,
    LIVE,
    WORKING,
    Audit,
    Kind,
    UserDocuments,
    Violation,
    conversation_path,
    ledger_path,
    task_path,
)
from shared.ids import task_id_for
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
