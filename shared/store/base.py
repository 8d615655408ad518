"""The storage interface the agent depends on."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar, overload

from shared.schemas.documents import (
    ActiveRun,
    ArchiveSegment,
    Conversation,
    Lesson,
    LessonVersion,
    Message,
    RunStatus,
    TaskDocument,
    UserSettings,
)
from shared.schemas.server import Family, Invite, LessonsProgress, Membership, TaskLedger

R = TypeVar("R")

Mutation = Callable[[Conversation], Conversation]
"""A pure change to a conversation: it may run more than once (on contention).

It returns a new ``Conversation`` made with ``model_copy``, keeping the fields it does
not change *by reference* (and the ``messages`` it keeps): the store writes only what
changed (``shared/store/patch.py``), so a streaming write costs the same at any length.
"""

Decision = Callable[[Conversation], tuple[Conversation, R]]
"""A ``Mutation`` that also returns what it decided on the document it was given (the
run it closed, the messages it claimed to move): ``ConversationStore.apply``."""


def files_named(messages: Sequence[Message]) -> list[str]:
    """Every path of a file the messages carry (each file's ``storagePath``, and a PDF's
    ``textPath``), once each, in order."""
    found: dict[str, None] = {}
    for message in messages:
        for part in message.content:
            if part.file is not None:
                found[part.file.storage_path] = None
                if part.file.text_path is not None:
                    found[part.file.text_path] = None
    return list(found)


def archived_file_path(user_id: str, conversation_id: str, path: str) -> tuple[str, ...]:
    """Where the index keeps ``path`` of the user's copy of ``conversation_id``
    (server-only; the id is a hash, as a path may hold any character)."""
    key = hashlib.sha256(f"{conversation_id}\n{path}".encode()).hexdigest()
    return (user_id, "server", "archivedFiles", key)


def reserved(document_id: str) -> bool:
    """Firestore reserves ids of the form ``__x__`` (it refuses them as ids and as map
    keys): no conversation can have one, so stores treat it as not found."""
    return document_id.startswith("__") and document_id.endswith("__")


@dataclass(frozen=True, slots=True)
class RunProbe:
    """The active run of a conversation as a cheap read sees it (no messages read)."""

    run_id: str | None
    status: RunStatus | None
    lease_expires_at: datetime | None = None

    def live(self, now: datetime) -> bool:
        """A run is active and its lease has not lapsed (one that lapsed is closed by
        the next send: it does not keep the conversation busy)."""
        lease = self.lease_expires_at
        return self.run_id is not None and (lease is None or lease > now)


class StoredMessages(Sequence[Message]):
    """A stored ``messages`` array, each message parsed the first time it is read."""

    __slots__ = ("_parsed", "_stored")

    def __init__(self, stored: Sequence[Mapping[str, Any]]) -> None:
        self._stored = stored
        self._parsed: list[Message | None] = [None] * len(stored)

    def __len__(self) -> int:
        return len(self._stored)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        message = self._parsed[index]
        if message is None:
            message = self._parsed[index] = Message.model_validate(self._stored[index])
        return message


class RunView:
    """A conversation as a resume follows it (``ConversationStore.watch``): its active
    run, parsed, and its finished ``messages``, each read and parsed only when asked for.

    A resume needs the active run on every write, and once the run has ended its one
    finished message and the user message before it. Decoding and parsing the whole
    conversation instead, for each stream, cost ~3 ms of CPU per stream per streaming
    write in a 40-message conversation on the emulator (``bench/stream_overhead.py``
    (e): 618 ms a write for 200 streams; 8 ms with this and one shared listener).
    """

    __slots__ = ("_load", "_messages", "active_run", "id")

    def __init__(
        self,
        conversation_id: str,
        active_run: ActiveRun | None,
        messages: Callable[[], Sequence[Message]],
    ) -> None:
        self.id = conversation_id
        self.active_run = active_run
        self._load = messages
        self._messages: Sequence[Message] | None = None

    @property
    def messages(self) -> Sequence[Message]:
        """The finished messages, oldest first."""
        if self._messages is None:
            self._messages = self._load()
        return self._messages

    @classmethod
    def of(cls, conversation: Conversation) -> RunView:
        """The view of a conversation read whole."""
        return cls(conversation.id, conversation.active_run, lambda: conversation.messages)

    @classmethod
    def stored(
        cls,
        conversation_id: str,
        active_run: Mapping[str, Any] | None,
        messages: Callable[[], Sequence[Mapping[str, Any]] | None],
    ) -> RunView:
        """The view of a stored document: ``activeRun`` as stored, and a function that
        reads the stored ``messages`` (called once, when they are first asked for)."""
        run = None if active_run is None else ActiveRun.model_validate(active_run)
        return cls(conversation_id, run, lambda: StoredMessages(messages() or []))


class ConversationStore(Protocol):
    """Conversation documents at ``/{userId}/client/conversations/{conversationId}``.

    Every change goes through ``create`` or ``mutate``, which are atomic: two
    concurrent mutations of one conversation both land, one after the other.
    The adapters subclass this Protocol for its one written method, ``mutate``.
    """

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        """The conversation, or ``None`` if this user has none with this id."""
        ...

    async def create(self, user_id: str, conversation: Conversation) -> None:
        """Store a new conversation (new content: it leaves ``CLOSING_RESERVE`` free).

        Raises:
            ConversationTooLarge: it would not fit, with that room kept.
            StoreError: one with this id already exists, or the store failed.
        """
        ...

    async def mutate(
        self, user_id: str, conversation_id: str, change: Mutation, reserve: int = 0
    ) -> Conversation:
        """Atomically read the latest document, apply ``change`` and write the result
        (``apply`` with a change that decides nothing).

        ``change`` must be pure: on contention it is called again with the newer
        document. Exceptions it raises abort the write and propagate, once raised on
        the latest version (an adapter that caches versions retries on a fresh read).

        A write that adds new content passes ``reserve=CLOSING_RESERVE``
        (``shared/store/limits.py``): if it would make the document larger and leave
        less than that free, it is refused, so that the writes that close things
        (passing nothing) always find room.

        Returns:
            The conversation as written.

        Raises:
            NotFound: this user has no conversation with this id.
            ConversationTooLarge: the result would not fit in one document (or, with
                ``reserve``, would grow into the room kept for closing).
            StoreError: the store failed.
        """
        conversation, _ = await self.apply(
            user_id, conversation_id, lambda c: (change(c), None), reserve=reserve
        )
        return conversation

    async def apply(
        self, user_id: str, conversation_id: str, change: Decision[R], *, reserve: int = 0
    ) -> tuple[Conversation, R]:
        """``mutate`` with a change that also decides something: the conversation as
        written, and the decision ``change`` made on the version it wrote over.

        ``change`` may run more than once (on contention, or again on a fresh read): the
        decision returned is always that of the run whose result was written (or, for a
        change that wrote nothing, of its run on a fresh read), never of one that lost
        a race or judged an out-of-date copy. Raises as ``mutate`` does.
        """
        ...

    def size(self, user_id: str, conversation_id: str) -> int | None:
        """The stored size of the version this store last wrote or read, if it knows it
        (cheap: no read, no serialisation); ``None`` otherwise."""
        ...

    async def archive(self, user_id: str, segment: ArchiveSegment) -> None:
        """Write (or rewrite: a move that died half-way is redone) one archive segment,
        and index the files its messages name (``index``) before or with it.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def index(self, user_id: str, segment: ArchiveSegment) -> None:
        """Add ``segment`` to the file index (``ArchivedFile``, server-only): for each
        path its messages name (``files_named``), this segment's number. Idempotent.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def segments(self, user_id: str, conversation_id: str) -> list[ArchiveSegment]:
        """Every archive segment written for the conversation, in order (including one
        a move left behind: ``Conversation.archived`` says which count)."""
        ...

    async def segment(
        self, user_id: str, conversation_id: str, number: int
    ) -> ArchiveSegment | None:
        """One archive segment, or ``None`` if none was written with this number.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def archived_file(self, user_id: str, conversation_id: str, path: str) -> list[int]:
        """The segments the file index names for ``path`` in this conversation (one
        small read; ``[]`` when none does).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def probe(self, user_id: str, conversation_id: str) -> RunProbe:
        """The id and status of the conversation's active run, read without its messages.

        A producer that has not written for a while calls this about once a second to
        notice a stop request or a takeover.

        Raises:
            NotFound: this user has no conversation with this id.
            StoreError: the store failed.
        """
        ...

    def watch(self, user_id: str, conversation_id: str) -> AsyncGenerator[RunView | None, None]:
        """Follow the conversation: its current state first, then each newer one, as a
        resume reads it (``RunView``).

        ``None`` means it does not exist (or was deleted). Intermediate versions may be
        skipped when they arrive faster than they are read; the latest is never skipped.
        Everyone watching one conversation in a process shares one listener, and each
        version is parsed once for all of them. Closing the iterator (``aclose``) stops
        following; the listener stops when the last one leaves.

        Raises:
            StoreError: the store failed.
        """
        ...


LedgerChange = Callable[[TaskLedger], TaskLedger]
LedgerDecision = Callable[[TaskLedger], tuple[TaskLedger, R]]
"""A ``LedgerChange`` that also returns what it decided (a claim's verdict, the attempts
granted): ``TaskLedgerStore.apply``."""

SectionChange = Callable[[TaskDocument | None], TaskDocument | None]
"""A pure change to a task's section: given the stored one (``None`` if there is none
yet), the one to write, or ``None`` to write nothing. It may run more than once."""

LedgerAndSections = Callable[[TaskLedger], tuple[TaskLedger, R, Mapping[str, SectionChange]]]
"""A ``LedgerDecision`` that also names, by task id, the changes to those tasks'
sections that must land in the same write: ``TaskLedgerStore.apply_with_sections``."""


class TaskLedgerStore(Protocol):
    """Each user's task ledger at ``/{userId}/server`` (server-only), and, written with
    it, its tasks' sections at ``/{userId}/client/tasks/{taskId}``. The adapters subclass
    this Protocol for its one written method, ``apply_with_sections``."""

    async def get(self, user_id: str) -> TaskLedger:
        """The ledger (empty if the user never had a task)."""
        ...

    async def mutate(self, user_id: str, change: LedgerChange) -> TaskLedger:
        """Atomically apply ``change`` (pure, may run more than once) and write the result
        (``apply`` with a change that decides nothing).

        Raises:
            StoreError: the store failed.
        """
        ledger, _ = await self.apply(user_id, lambda led: (change(led), None))
        return ledger

    async def apply(self, user_id: str, change: LedgerDecision[R]) -> tuple[TaskLedger, R]:
        """``mutate`` with a change that also decides something: the ledger as written,
        and the decision of the run of ``change`` whose result was written (or, for a
        change that wrote nothing, of its run on a fresh read).

        Raises:
            StoreError: the store failed.
        """
        return await self.apply_with_sections(user_id, lambda led: (*change(led), {}))

    async def apply_with_sections(
        self, user_id: str, change: LedgerAndSections[R]
    ) -> tuple[TaskLedger, R]:
        """``apply``, and the section changes ``change`` names, in one atomic write: the
        ledger and each section named are read, every change runs on what was read, and
        all the results are written together, each on the condition that it is still the
        version read (a section not there yet: that none was created meanwhile). If any
        of them changed in between, nothing lands and all is judged again on a fresh
        read; so a section never says a task ended unlike its record, nor lags behind it.

        Raises:
            IllegalTransition: from a section's change (nothing is written).
            StoreError: the store failed (nothing is written).
        """
        ...


Opening = Callable[[TaskLedger, Conversation | None], tuple[TaskLedger, Conversation, R]]
"""A pure change to a user's ledger and one of their conversations together, given both
as stored (``None``: no such conversation yet): a send's admission (a run slot, today's
tokens) and its message (``TaskPort.admit_and_open``). It may run more than once; what it
raises aborts the write."""


class OpeningStore(Protocol):
    """A user's ledger (``/{userId}/server``) and one of their conversations changed in
    one commit: a send's admission and its message land together or not at all, and the
    send waits for one commit rather than two in turn (``bench/stream_overhead.py`` (a))."""

    async def open(
        self,
        user_id: str,
        conversation_id: str,
        change: Opening[R],
        *,
        new: bool,
        reserve: int = 0,
    ) -> tuple[Conversation, R]:
        """Read the ledger and the conversation, apply ``change`` to both and write both
        results in one commit, each on the condition that it is still the version read
        (a conversation not there: that none was created meanwhile). If either changed
        in between, nothing lands and ``change`` runs again on a fresh read.

        ``new``: the conversation is expected not to exist (its id was just made), so it
        is not read first. ``reserve`` as in ``ConversationStore.mutate``.

        Returns:
            The conversation as written, and what ``change`` decided (in the run that
            was written).

        Raises:
            What ``change`` raises, judged on the latest versions (nothing is written).
            ConversationTooLarge: the conversation would not fit (with ``reserve``).
            StoreError: the store failed (nothing is written).
        """
        ...


class TaskDocumentStore(Protocol):
    """Task sections at ``/{userId}/client/tasks/{taskId}`` (the owner reads them)."""

    async def get(self, user_id: str, task_id: str) -> TaskDocument | None:
        """The section, or ``None`` if this user has none with this id."""
        ...

    async def apply(self, user_id: str, task_id: str, change: SectionChange) -> TaskDocument | None:
        """Atomically read the section, apply ``change`` (pure) and write its result;
        returns the section as stored afterwards (``None`` if there is none).

        Raises:
            IllegalTransition: from ``change``, judged on the latest version.
            StoreError: the store failed.
        """
        ...

    async def recent(
        self, user_id: str, limit: int = 20, conversation_id: str | None = None
    ) -> list[TaskDocument]:
        """The user's sections (of one conversation, if given), newest first: a
        Firestore query on ``createdAt`` (and ``conversationId``).

        Raises:
            StoreError: the store failed.
        """
        ...


NO_LESSON = "No lesson with this id."


def changed(expected: int, current: int) -> str:
    """What a refused change against a stale version of a lesson is told."""
    return (
        f"The lesson changed since version {expected} (it is now version {current}); "
        "nothing was changed. Read it again and redo the change on the current text."
    )


def next_version(lesson: Lesson, expected_version: int) -> None:
    """Refuse a replacement that is not the next version of the one it replaces.

    Raises:
        ValueError: it is not (a bug in the caller, never the user's doing).
    """
    if lesson.version != expected_version + 1:
        raise ValueError(
            f"lesson {lesson.id}: version {lesson.version} cannot replace {expected_version}"
        )


def kept_out(version: int, kept: int) -> int | None:
    """The kept version that keeping ``version`` pushes out, if any.

    Every change adds one to a lesson's version (``replace`` insists), so the kept
    versions are always the ``kept`` just below the current one, and keeping one more
    drops exactly one: pruning is one delete in the same write, never a query.
    """
    out = version - kept
    return out if out >= 1 else None


@dataclass(frozen=True, slots=True)
class KeptVersion:
    """A kept version of a lesson as a listing shows it (its body is not read)."""

    version: int
    title: str
    saved_at: datetime  # when this version was saved (its ``updatedAt``)
    characters: int


class LessonStore(Protocol):
    """Lessons at ``/{userId}/client/lessons/{lessonId}``, and their earlier versions at
    ``.../versions/{version}``: each ``replace`` and ``delete`` keeps the version it
    overwrites in the same atomic write (so none is ever lost), and drops the oldest past
    the store's ``versions_kept``.

    Each ``create``, ``replace`` and ``delete`` also writes, in that same atomic write, the
    user's progress summary (``LessonsProgress``, ``/{userId}/server/progress/lessons``):
    the lesson's counts (``shared/lessons/progress.counts``, computed here and nowhere
    else) recorded, or its entry dropped.
    """

    async def get(self, user_id: str, lesson_id: str) -> Lesson | None:
        """The lesson, or ``None`` if this user has none with this id."""
        ...

    async def create(self, user_id: str, lesson: Lesson) -> Lesson:
        """Store ``lesson`` unless one with its id exists; returns the stored one.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def replace(self, user_id: str, lesson: Lesson, expected_version: int) -> Lesson:
        """Store ``lesson``, the next version of a stored one (``expected_version + 1``),
        if the stored one is still at ``expected_version``; the stored one is kept as a
        version. Checked and written atomically.

        Raises:
            ValueError: ``lesson.version`` is not ``expected_version + 1``.
            NotFound: this user has no lesson with that id.
            VersionConflict: the stored lesson is at another version.
            StoreError: the store failed.
        """
        ...

    async def delete(self, user_id: str, lesson_id: str) -> bool:
        """Delete the lesson, keeping it as a version (so it can be restored); ``False``
        if this user had none with this id.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def recent(self, user_id: str, limit: int) -> list[Lesson]:
        """The user's lessons, the most recently updated first, at most ``limit`` (a
        Firestore query on ``updatedAt``).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def progress(self, user_ids: Sequence[str]) -> dict[str, LessonsProgress | None]:
        """Each user's progress summary as stored (``None``: none yet), read together:
        one small document per user, no lesson read.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def refill(self, user_id: str) -> LessonsProgress:
        """The user's summary rebuilt from their newest ``progress.KEPT`` lessons (each
        one parsed, off the event loop), and stored unless a lesson write changed the
        summary meanwhile (then it is returned, not stored; the next read tries again).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def versions(self, user_id: str, lesson_id: str) -> list[KeptVersion]:
        """The kept versions of the lesson (also of a deleted one), newest first.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def version(self, user_id: str, lesson_id: str, version: int) -> LessonVersion | None:
        """One kept version, or ``None`` if it is not kept.

        Raises:
            StoreError: the store failed.
        """
        ...


@dataclass(frozen=True, slots=True)
class Reads:
    """What one family change reads, all inside its transaction.

    ``token_hash`` finds the family and the invite through the token's index
    (``/inviteTokens/{hash}``) instead of ``family_id`` and ``invite_id``; ``all_invites``
    reads every invite of the family (those its ``invite_ids`` name); ``users`` are the
    users whose ``Membership`` the change judges or changes.
    """

    family_id: str | None = None
    token_hash: str | None = None
    invite_id: str | None = None
    all_invites: bool = False
    users: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Household:
    """A family and what hangs on it, as one change reads it and as it leaves it.

    ``family`` is ``None`` when there is none (yet, or any more); ``invites`` are those
    read, by id (one dropped from it is deleted, with its token); ``memberships`` are
    those of the users read (an empty ``Membership`` for a user without one).
    """

    family: Family | None = None
    invites: Mapping[str, Invite] = field(default_factory=dict)
    memberships: Mapping[str, Membership] = field(default_factory=dict)


FamilyChange = Callable[[Household], tuple[Household, R]]
"""A pure change to a household that also returns what it decided (the family as it
now is, the invite made): ``shared/families/membership.py``. It raises the refusals
(``FamilyFull``, ``InviteUsedUp``…), which abort the transaction and change nothing."""


class FamilyStore(Protocol):
    """Families at ``/families/{familyId}``, their invites and token index, and each
    user's ``Membership`` and ``FamilyMirror`` (``shared/schemas/server.py`` draws the map).

    Every change is one transaction (``apply``): what it reads is what it judged, and
    every member's mirror is written with the change, so a mirror never disagrees with
    the family for longer than the write takes to reach the reader.
    """

    async def read(self, reads: Reads) -> Household:
        """What ``reads`` names, as stored now (read together, in one transaction).

        Raises:
            StoreError: the store failed.
        """
        ...

    async def apply(self, reads: Reads, change: FamilyChange[R]) -> tuple[Household, R]:
        """In one transaction: read what ``reads`` names, run ``change`` on it, and write
        what changed (``shared/store/households.py`` says which documents that is).

        ``change`` must be pure: on contention it runs again on the newer documents. Its
        exceptions abort the transaction (nothing is written) and propagate.

        Returns:
            The household as written, and the decision of the run that was written.

        Raises:
            StoreError: the store failed, or the change kept losing races.
        """
        ...


Path = tuple[str, ...]
"""A document's path, collection and document ids in turn: ``("u1", "client", ...)``."""


@dataclass(frozen=True, slots=True)
class Put:
    """Write ``document`` whole at ``path`` (creating it, or replacing what is there)."""

    path: Path
    document: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Amend:
    """Turn the conversation at ``path`` from ``before`` (as this transaction read it;
    ``None``: there was none) into ``after``. The adapter writes ``after`` whole when it
    is new, and otherwise only what differs (``shared/store/patch.diff``: messages added
    at the end are appended, each changed field is set)."""

    path: Path
    before: Conversation | None
    after: Conversation


class Reader(Protocol):
    """Reads inside one transaction (``PostStore.transact``)."""

    async def get(self, path: Path) -> dict[str, Any] | None:
        """The document at ``path`` as stored, or ``None`` if there is none."""
        ...


Transacted = Callable[[Reader], Awaitable[tuple[Sequence[Put | Amend], R]]]
"""The body of one transaction: it reads what it needs through the ``Reader`` (every
read before any write), then returns the writes and what it decided. It may run more
than once (on contention), so it has no other effects; what it raises aborts the
transaction, with nothing written."""


class PostStore(Protocol):
    """Writes that span several users' subtrees and must land together or not at all:
    a family message delivered into each member's copy of a shared conversation, with
    the receipt that makes a retry harmless (``shared/families/delivery.py``)."""

    async def transact(self, work: Transacted[R], *, read_only: bool = False) -> R:
        """Run ``work`` in one transaction: what it read is what it judged, and its
        writes all land, or none does. ``read_only`` work may return no writes.

        Raises:
            StoreError: the store failed, or the transaction kept losing races.
        """
        ...


class SettingsStore(Protocol):
    """Each user's settings: the truth at ``/{uid}/server/settings/current`` and the
    mirror the user reads at ``/{uid}/client/settings/current``
    (``shared/store/settings.py`` names both)."""

    async def get(self, user_ids: Sequence[str]) -> dict[str, UserSettings]:
        """The settings of each of ``user_ids`` as stored now (the defaults for a user who
        never changed them), read together.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def put(self, user_id: str, settings: UserSettings) -> None:
        """Write ``settings`` as the user's truth and mirror, both or neither.

        Raises:
            StoreError: the store failed.
        """
        ...
