"""In-memory stores for unit tests and offline runs (documents kept as Firestore would:
serialised dicts, so what is read back went through the same validation)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

from shared.config import DEFAULT_LESSON_VERSIONS_KEPT
from shared.errors import NotFound, StoreError, VersionConflict
from shared.lessons import progress
from shared.lessons.progress import KEPT
from shared.schemas.documents import (
    ArchiveSegment,
    Conversation,
    Lesson,
    LessonVersion,
    TaskDocument,
    UserSettings,
)
from shared.schemas.server import (
    ArchivedFile,
    Family,
    Invite,
    LessonsProgress,
    Membership,
    TaskLedger,
)
from shared.store.base import (
    NO_LESSON,
    Amend,
    ConversationStore,
    Decision,
    FamilyChange,
    Household,
    KeptVersion,
    LedgerAndSections,
    Opening,
    OpeningStore,
    PostStore,
    Put,
    R,
    Reads,
    RunProbe,
    RunView,
    SectionChange,
    TaskDocumentStore,
    TaskLedgerStore,
    Transacted,
    archived_file_path,
    changed,
    files_named,
    kept_out,
    next_version,
)
from shared.store.households import (
    Path,
    family_path,
    invite_path,
    membership_path,
    plan,
    token_path,
)
from shared.store.limits import CLOSING_RESERVE, check_size
from shared.store.listeners import Key, Listeners, Listening
from shared.store.patch import Sizes, apply, diff
from shared.store.settings import settings_mirror_path, settings_path


class InMemoryConversationStore(ConversationStore):
    """Conversations in a dict, one lock per store, written by the same patches as
    Firestore (``shared/store/patch.py``).

    ``writes`` counts every successful write, per conversation, and ``written`` lists
    the field paths each one sent, so tests can check throttling and flat-cost
    streaming writes. ``listeners`` holds the conversations being watched, one listener
    each (as on Firestore). ``segment_reads`` counts the archive segments read; the file
    index (``ArchivedFile`` documents, by path) is kept beside them.
    """

    def __init__(self) -> None:
        self._documents: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self.writes: dict[str, int] = {}
        self.written: dict[str, list[set[str]]] = {}
        self._segments: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._files: dict[tuple[str, ...], dict[str, Any]] = {}
        self.segment_reads = 0
        self._delivering: dict[Key, Callable[[dict[str, Any] | None], None]] = {}
        self.listeners: Listeners[dict[str, Any] | None, RunView | None] = Listeners(
            self._listen, _view
        )

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        document = self._documents.get((user_id, conversation_id))
        return None if document is None else Conversation.model_validate(copy.deepcopy(document))

    @property
    def lock(self) -> asyncio.Lock:
        """Held by each change (a transaction across stores holds it too)."""
        return self._lock

    def document(self, user_id: str, conversation_id: str) -> dict[str, Any] | None:
        """The conversation as stored (a copy), with no lock: for a holder of ``lock``."""
        document = self._documents.get((user_id, conversation_id))
        return None if document is None else copy.deepcopy(document)

    def put(
        self,
        user_id: str,
        conversation_id: str,
        document: dict[str, Any],
        fields: set[str] | None = None,
    ) -> None:
        """Store ``document`` whole, counted as a write (of ``fields``, all of them
        unless given): for a holder of ``lock``."""
        self._store(
            (user_id, conversation_id), document, set(document) if fields is None else fields
        )

    async def create(self, user_id: str, conversation: Conversation) -> None:
        async with self._lock:
            key = (user_id, conversation.id)
            if key in self._documents:
                raise StoreError(f"conversation {conversation.id} already exists")
            document = conversation.to_firestore()
            check_size(Sizes.of(document).total, CLOSING_RESERVE)
            self._store(key, document, set(document))

    async def apply(
        self, user_id: str, conversation_id: str, change: Decision[R], *, reserve: int = 0
    ) -> tuple[Conversation, R]:
        async with self._lock:
            key = (user_id, conversation_id)
            current = await self.get(user_id, conversation_id)
            if current is None:
                raise NotFound("No conversation with this id.")
            updated, decided = change(current)
            patch = diff(current, updated)
            if patch:
                document = apply(self._documents[key], copy.deepcopy(patch))
                before = Sizes.of(self._documents[key]).total if reserve else 0
                check_size(Sizes.of(document).total, reserve, before)
                self._store(key, document, patch.paths)
            return updated, decided

    def size(self, user_id: str, conversation_id: str) -> int | None:
        document = self._documents.get((user_id, conversation_id))
        return None if document is None else Sizes.of(document).total

    async def archive(self, user_id: str, segment: ArchiveSegment) -> None:
        await self.index(user_id, segment)
        key = (user_id, segment.conversation_id, segment.segment)
        self._segments[key] = copy.deepcopy(segment.to_firestore())

    async def index(self, user_id: str, segment: ArchiveSegment) -> None:
        for path in files_named(segment.messages):
            entry = self._files.setdefault(
                archived_file_path(user_id, segment.conversation_id, path),
                ArchivedFile(conversation_id=segment.conversation_id, path=path).to_firestore(),
            )
            if segment.segment not in entry["segments"]:
                entry["segments"] = [*entry["segments"], segment.segment]

    async def segments(self, user_id: str, conversation_id: str) -> list[ArchiveSegment]:
        found = sorted(
            (n, document)
            for (uid, cid, n), document in self._segments.items()
            if (uid, cid) == (user_id, conversation_id)
        )
        self.segment_reads += len(found)
        return [ArchiveSegment.model_validate(copy.deepcopy(d)) for _, d in found]

    async def segment(
        self, user_id: str, conversation_id: str, number: int
    ) -> ArchiveSegment | None:
        document = self._segments.get((user_id, conversation_id, number))
        if document is None:
            return None
        self.segment_reads += 1
        return ArchiveSegment.model_validate(copy.deepcopy(document))

    async def archived_file(self, user_id: str, conversation_id: str, path: str) -> list[int]:
        entry = self._files.get(archived_file_path(user_id, conversation_id, path))
        return [] if entry is None else list(entry["segments"])

    async def probe(self, user_id: str, conversation_id: str) -> RunProbe:
        document = self._documents.get((user_id, conversation_id))
        if document is None:
            raise NotFound("No conversation with this id.")
        run = document.get("activeRun") or {}
        return RunProbe(run.get("runId"), run.get("status"), run.get("leaseExpiresAt"))

    def watch(self, user_id: str, conversation_id: str) -> AsyncGenerator[RunView | None, None]:
        return self.listeners.follow((user_id, conversation_id))

    def _listen(self, key: Key, deliver: Callable[[dict[str, Any] | None], None]) -> Listening:
        self._delivering[key] = deliver
        deliver(self._documents.get(key))

        async def stop() -> None:
            if self._delivering.get(key) is deliver:
                del self._delivering[key]

        return Listening(stop)

    def _store(self, key: tuple[str, str], document: dict[str, Any], fields: set[str]) -> None:
        # Stored documents are never changed in place (``apply`` copies what it changes),
        # so listeners may keep them.
        self._documents[key] = copy.deepcopy(document)
        self.writes[key[1]] = self.writes.get(key[1], 0) + 1
        self.written.setdefault(key[1], []).append(fields)
        deliver = self._delivering.get(key)
        if deliver is not None:
            deliver(self._documents[key])


def _view(document: dict[str, Any] | None) -> RunView | None:
    if document is None:
        return None
    return RunView.stored(
        document["id"], document.get("activeRun"), lambda: document.get("messages")
    )


class InMemoryTaskLedgerStore(TaskLedgerStore):
    """Task ledgers in a dict, one lock per store, and the sections written with them
    (``sections``: the section store this one writes into, its own unless given).
    ``writes`` counts the changes written (a change that changes nothing writes nothing,
    as on Firestore), so tests can check that a refused request wrote none."""

    def __init__(self, sections: InMemoryTaskDocumentStore | None = None) -> None:
        self._documents: dict[str, dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self.writes = 0
        self.sections = sections if sections is not None else InMemoryTaskDocumentStore()

    async def get(self, user_id: str) -> TaskLedger:
        document = self._documents.get(user_id)
        return TaskLedger() if document is None else TaskLedger.model_validate(document)

    @property
    def lock(self) -> asyncio.Lock:
        """Held by each change (a write across stores holds it too)."""
        return self._lock

    def put(self, user_id: str, ledger: TaskLedger) -> None:
        """Store ``ledger``, counted as a write if it changed: for a holder of ``lock``."""
        document = ledger.to_firestore()
        if document != self._documents.get(user_id):
            self._documents[user_id] = copy.deepcopy(document)
            self.writes += 1

    async def apply_with_sections(
        self, user_id: str, change: LedgerAndSections[R]
    ) -> tuple[TaskLedger, R]:
        async with self._lock:
            updated, decided, named = change(await self.get(user_id))
            sections = self.sections.changed(user_id, named)
            # Every change has run: the sections go in first (``put`` may fail, as a
            # commit may, before anything is kept), then the ledger, with no await
            # in between.
            self.sections.put(user_id, sections)
            self.put(user_id, updated)
            return updated, decided


class InMemoryTaskDocumentStore(TaskDocumentStore):
    """Task sections in a dict; ``writes`` counts each task's writes (throttling tests)."""

    def __init__(self) -> None:
        self._documents: dict[tuple[str, str], dict[str, Any]] = {}
        self.writes: dict[str, int] = {}

    async def get(self, user_id: str, task_id: str) -> TaskDocument | None:
        return self._read(user_id, task_id)

    def _read(self, user_id: str, task_id: str) -> TaskDocument | None:
        document = self._documents.get((user_id, task_id))
        return None if document is None else TaskDocument.model_validate(copy.deepcopy(document))

    async def apply(self, user_id: str, task_id: str, change: SectionChange) -> TaskDocument | None:
        # No await between the read and the write: atomic, as Firestore's precondition.
        current = self._read(user_id, task_id)
        updated = self.changed(user_id, {task_id: change}).get(task_id)
        if updated is None:
            return current
        self.put(user_id, {task_id: updated})
        return updated

    def changed(
        self, user_id: str, changes: Mapping[str, SectionChange]
    ) -> dict[str, TaskDocument]:
        """The sections ``changes`` change, as they would be written (none is written)."""
        written: dict[str, TaskDocument] = {}
        for task_id, change in changes.items():
            current = self._read(user_id, task_id)
            updated = change(current)
            if updated is not None and updated != current:
                written[task_id] = updated
        return written

    def put(self, user_id: str, sections: Mapping[str, TaskDocument]) -> None:
        """Write ``sections`` (by task id), all at once."""
        for task_id, section in sections.items():
            self._documents[(user_id, task_id)] = section.to_firestore()
            self.writes[task_id] = self.writes.get(task_id, 0) + 1

    async def recent(
        self, user_id: str, limit: int = 20, conversation_id: str | None = None
    ) -> list[TaskDocument]:
        mine = [
            TaskDocument.model_validate(d)
            for (uid, _), d in self._documents.items()
            if uid == user_id and conversation_id in (None, d["conversationId"])
        ]
        return sorted(mine, key=lambda t: t.created_at, reverse=True)[:limit]


class InMemoryLessonStore:
    """Lessons in a dict, their kept versions beside them, and each user's progress
    summary (``shared/lessons/progress.py``), written with every lesson change as the
    Firestore adapter writes it (``progress_writes`` counts them; ``refills`` counts the
    summaries rebuilt from the lessons)."""

    def __init__(
        self, versions_kept: int = DEFAULT_LESSON_VERSIONS_KEPT, progress_kept: int = KEPT
    ) -> None:
        self._documents: dict[tuple[str, str], dict[str, Any]] = {}
        self._versions: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
        self._progress: dict[str, dict[str, Any]] = {}
        self._kept = versions_kept
        self._progress_kept = progress_kept
        self.progress_writes = 0
        self.refills = 0

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        document = self._documents.get((user_id, lesson_id))
        return None if document is None else Lesson.model_validate(document)

    def _summary(self, user_id: str, lesson_id: str) -> LessonsProgress:
        """The user's summary as stored, or a new one (``progress.started``)."""
        stored = self._progress.get(user_id)
        if stored is not None:
            return LessonsProgress.model_validate(copy.deepcopy(stored))
        alone = all(lid == lesson_id for uid, lid in self._documents if uid == user_id)
        return progress.started(alone)

    def _put_summary(self, user_id: str, summary: LessonsProgress) -> None:
        self._progress[user_id] = summary.to_firestore()
        self.progress_writes += 1

    async def create(self, user_id: str, lesson: Lesson) -> Lesson:
        # No await from the read to the write: atomic, as Firestore's batch with its
        # preconditions. (Counted here, on the loop: the Firestore adapter counts in a
        # worker thread; a fake's writes stay deterministic under a manual clock.)
        counted = progress.counts(lesson)
        stored = self._documents.get((user_id, lesson.id))
        if stored is not None:
            return Lesson.model_validate(stored)
        summary = self._summary(user_id, lesson.id)
        updated = progress.recorded(summary, lesson.id, counted, self._progress_kept)
        self._documents[(user_id, lesson.id)] = lesson.to_firestore()
        self._put_summary(user_id, updated)
        return lesson

    def _keep(self, user_id: str, document: dict[str, Any]) -> None:
        lesson = Lesson.model_validate(document)
        kept = self._versions.setdefault((user_id, lesson.id), {})
        kept[lesson.version] = LessonVersion.of(lesson).to_firestore()
        out = kept_out(lesson.version, self._kept)
        if out is not None:
            kept.pop(out, None)

    async def replace(self, user_id: str, lesson: Lesson, expected_version: int) -> Lesson:
        next_version(lesson, expected_version)
        counted = progress.counts(lesson)
        # Checked and written with no await between: atomic, as Firestore's precondition.
        stored = self._documents.get((user_id, lesson.id))
        if stored is None:
            raise NotFound(NO_LESSON)
        if stored["version"] != expected_version:
            raise VersionConflict(changed(expected_version, stored["version"]), stored["version"])
        summary = self._summary(user_id, lesson.id)
        updated = progress.recorded(summary, lesson.id, counted, self._progress_kept)
        self._keep(user_id, stored)
        self._documents[(user_id, lesson.id)] = lesson.to_firestore()
        self._put_summary(user_id, updated)
        return lesson

    async def delete(self, user_id: str, lesson_id: str) -> bool:
        stored = self._documents.get((user_id, lesson_id))
        if stored is None:
            return False
        summary = self._summary(user_id, lesson_id)
        self._keep(user_id, stored)
        del self._documents[(user_id, lesson_id)]
        self._put_summary(user_id, progress.forgotten(summary, lesson_id))
        return True

    async def recent(self, user_id: str, limit: int) -> list[Lesson]:
        mine = [
            Lesson.model_validate(d) for (uid, _), d in self._documents.items() if uid == user_id
        ]
        return sorted(mine, key=lambda lesson: lesson.updated_at, reverse=True)[:limit]

    async def progress(self, user_ids: Sequence[str]) -> dict[str, LessonsProgress | None]:
        found: dict[str, LessonsProgress | None] = {}
        for uid in dict.fromkeys(user_ids):
            stored = self._progress.get(uid)
            found[uid] = None if stored is None else LessonsProgress.model_validate(stored)
        return found

    async def refill(self, user_id: str) -> LessonsProgress:
        before = self._progress.get(user_id)
        writes = 0 if before is None else int(before.get("writes", 0))
        lessons = await self.recent(user_id, self._progress_kept)
        summary = await asyncio.to_thread(progress.summarized, lessons, writes, self._progress_kept)
        self.refills += 1
        if self._progress.get(user_id) is before:  # no lesson was written meanwhile
            self._put_summary(user_id, summary)
        return summary

    def summary(self, user_id: str) -> dict[str, Any] | None:
        """The user's progress summary as stored (a copy), for tests and the audit."""
        stored = self._progress.get(user_id)
        return None if stored is None else copy.deepcopy(stored)

    async def versions(self, user_id: str, lesson_id: str) -> list[KeptVersion]:
        kept = [
            LessonVersion.model_validate(d)
            for d in self._versions.get((user_id, lesson_id), {}).values()
        ]
        return [
            KeptVersion(v.version, v.title, v.updated_at, v.characters)
            for v in sorted(kept, key=lambda v: -v.version)
        ]

    async def version(self, user_id: str, lesson_id: str, version: int) -> LessonVersion | None:
        document = self._versions.get((user_id, lesson_id), {}).get(version)
        return None if document is None else LessonVersion.model_validate(document)


class InMemoryFamilyStore:
    """Families and what hangs on them, as documents by path (``documents``, which
    tests read as they would Firestore); one lock makes each change a transaction."""

    def __init__(self) -> None:
        self.documents: dict[Path, dict[str, Any]] = {}
        self._lock = asyncio.Lock()

    @property
    def lock(self) -> asyncio.Lock:
        """Held by each change (a transaction across stores holds it too)."""
        return self._lock

    async def read(self, reads: Reads) -> Household:
        async with self._lock:
            return self._read(reads)

    async def apply(self, reads: Reads, change: FamilyChange[R]) -> tuple[Household, R]:
        async with self._lock:
            before = self._read(reads)
            after, decided = change(before)
            for write in plan(before, after):
                if write.document is None:
                    self.documents.pop(write.path, None)
                else:
                    self.documents[write.path] = copy.deepcopy(write.document)
            return after, decided

    def _get(self, path: Path) -> dict[str, Any] | None:
        document = self.documents.get(path)
        return None if document is None else copy.deepcopy(document)

    def _read(self, reads: Reads) -> Household:
        family_id, invite_id = reads.family_id, reads.invite_id
        if reads.token_hash is not None:
            token = self._get(token_path(reads.token_hash))
            family_id, invite_id = (token["familyId"], token["inviteId"]) if token else (None, None)
        memberships = {
            uid: Membership.model_validate(self._get(membership_path(uid)) or {})
            for uid in reads.users
        }
        if family_id is None:
            return Household(memberships=memberships)
        stored = self._get(family_path(family_id))
        family = None if stored is None else Family.model_validate(stored)
        wanted = [*(family.invite_ids if family and reads.all_invites else []), invite_id]
        invites = {
            iid: Invite.model_validate(found)
            for iid in wanted
            if iid is not None and (found := self._get(invite_path(family_id, iid)))
        }
        return Household(family=family, invites=invites, memberships=memberships)


class InMemoryPostStore:
    """``PostStore`` over the in-memory conversations and families (and any other
    server-only document, kept by path beside the families'): both locks held for the
    whole transaction, so its reads and writes are atomic as on Firestore."""

    def __init__(
        self, conversations: InMemoryConversationStore, families: InMemoryFamilyStore
    ) -> None:
        self._conversations = conversations
        self._families = families

    def _conversation_key(self, path: Path) -> tuple[str, str] | None:
        if len(path) == 4 and path[1:3] == ("client", "conversations"):
            return path[0], path[3]
        return None

    def _get(self, path: Path) -> dict[str, Any] | None:
        key = self._conversation_key(path)
        if key is not None:
            return self._conversations.document(*key)
        document = self._families.documents.get(path)
        return None if document is None else copy.deepcopy(document)

    async def get(self, path: Path) -> dict[str, Any] | None:
        return self._get(path)

    async def transact(self, work: Transacted[R], *, read_only: bool = False) -> R:
        async with self._conversations.lock, self._families.lock:
            writes, decided = await work(self)
            if read_only and writes:
                raise ValueError("a read-only transaction cannot write")
            for write in writes:
                self._write(write)
            return decided

    def _write(self, write: Put | Amend) -> None:
        fields: set[str] | None = None
        if isinstance(write, Put):
            document = copy.deepcopy(dict(write.document))
        elif write.before is None:
            document = write.after.to_firestore()
        else:
            before = self._get(write.path)
            if before is None:
                raise StoreError(f"no document at {'/'.join(write.path)} to change")
            patch = diff(write.before, write.after)
            if not patch:
                return
            document, fields = apply(before, copy.deepcopy(patch)), patch.paths
        key = self._conversation_key(write.path)
        if key is not None:
            self._conversations.put(*key, document, fields)
        else:
            self._families.documents[write.path] = document


class InMemoryOpeningStore(OpeningStore):
    """``OpeningStore`` over the in-memory conversations and ledgers: both locks held for
    the whole change, and both documents stored with no await in between (both or
    neither, as Firestore's batch)."""

    def __init__(
        self, conversations: InMemoryConversationStore, ledgers: InMemoryTaskLedgerStore
    ) -> None:
        self._conversations = conversations
        self._ledgers = ledgers

    async def open(
        self,
        user_id: str,
        conversation_id: str,
        change: Opening[R],
        *,
        new: bool,
        reserve: int = 0,
    ) -> tuple[Conversation, R]:
        async with self._conversations.lock, self._ledgers.lock:
            stored = self._conversations.document(user_id, conversation_id)
            current = None if stored is None else Conversation.model_validate(stored)
            ledger, updated, decided = change(await self._ledgers.get(user_id), current)
            if stored is None or current is None:
                document, fields = updated.to_firestore(), None
                check_size(Sizes.of(document).total, reserve)
            else:
                patch = diff(current, updated)
                document, fields = apply(stored, copy.deepcopy(patch)), patch.paths
                check_size(Sizes.of(document).total, reserve, Sizes.of(stored).total)
            # Every check has passed: both are stored, with no await in between (the
            # conversation first: ``put`` may fail, as a commit may, before anything is kept).
            if fields is None or fields:
                self._conversations.put(user_id, conversation_id, document, fields)
            self._ledgers.put(user_id, ledger)
            return updated, decided


class _NoOpenings:
    """The opening store of stores that are neither both in memory nor both on
    Firestore (a test's wrapped stores, given none): every opening fails, as a store
    that is down."""

    async def open(
        self,
        user_id: str,
        conversation_id: str,
        change: Opening[R],
        *,
        new: bool,
        reserve: int = 0,
    ) -> tuple[Conversation, R]:
        raise StoreError("No opening store was given beside these stores.")


def openings_beside(conversations: ConversationStore, ledgers: TaskLedgerStore) -> OpeningStore:
    """The in-memory opening store over these stores, if both are in memory."""
    if isinstance(conversations, InMemoryConversationStore) and isinstance(
        ledgers, InMemoryTaskLedgerStore
    ):
        return InMemoryOpeningStore(conversations, ledgers)
    return _NoOpenings()


class _NoPosts:
    """The post store of stores that are neither both in memory nor both on Firestore
    (a test's wrapped fakes): every transaction fails, as a store that is down."""

    async def transact(self, work: Transacted[R], *, read_only: bool = False) -> R:
        raise StoreError("No post store was given beside these stores.")


def posts_beside(conversations: ConversationStore, families: object) -> PostStore:
    """The in-memory post store over these stores, if both are in memory."""
    if isinstance(conversations, InMemoryConversationStore) and isinstance(
        families, InMemoryFamilyStore
    ):
        return InMemoryPostStore(conversations, families)
    return _NoPosts()


def sections_beside(ledger: TaskLedgerStore) -> TaskDocumentStore:
    """The section store a ledger store writes sections into, if it is in memory (an
    empty one otherwise: a test's ledger on Firestore without its sections)."""
    if isinstance(ledger, InMemoryTaskLedgerStore):
        return ledger.sections
    return InMemoryTaskDocumentStore()


class InMemorySettingsStore:
    """Users' settings as documents by path (``documents``: the truth and the mirror, as
    Firestore holds them); ``reads`` counts the reads, so tests see that a decision
    looked at the store rather than a copy in memory."""

    def __init__(self) -> None:
        self.documents: dict[tuple[str, ...], dict[str, Any]] = {}
        self.reads = 0

    async def get(self, user_ids: Sequence[str]) -> dict[str, UserSettings]:
        self.reads += 1
        return {
            uid: UserSettings.model_validate(self.documents.get(settings_path(uid)) or {})
            for uid in dict.fromkeys(user_ids)
        }

    async def put(self, user_id: str, settings: UserSettings) -> None:
        document = settings.to_firestore()
        self.documents[settings_path(user_id)] = copy.deepcopy(document)
        self.documents[settings_mirror_path(user_id)] = copy.deepcopy(document)
