"""The storage interface the agent depends on: the conversation store, here, and the
other stores' interfaces, one module each (``ledgers.py``: task ledgers, sections and
openings; ``lessons.py``; ``families.py``; ``posts.py``; ``settings.py``), named here
too so that one import finds them all."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar, overload

from shared.schemas.documents import (
    ActiveRun,
    ArchiveSegment,
    Conversation,
    Message,
    RunStatus,
)
from shared.store.families import FamilyChange, FamilyStore, Household, Reads
from shared.store.ledgers import (
    LedgerAndSections,
    LedgerChange,
    LedgerDecision,
    Opening,
    OpeningStore,
    SectionChange,
    TaskDocumentStore,
    TaskLedgerStore,
)
from shared.store.lessons import (
    NO_LESSON,
    KeptVersion,
    LessonStore,
    changed,
    kept_out,
    next_version,
)
from shared.store.posts import Amend, Path, PostStore, Put, Reader, Transacted
from shared.store.settings import SettingsStore

__all__ = [
    "NO_LESSON",
    "Amend",
    "ConversationStore",
    "Decision",
    "FamilyChange",
    "FamilyStore",
    "Household",
    "KeptVersion",
    "LedgerAndSections",
    "LedgerChange",
    "LedgerDecision",
    "LessonStore",
    "Mutation",
    "Opening",
    "OpeningStore",
    "Path",
    "PostStore",
    "Put",
    "R",
    "Reader",
    "Reads",
    "RunProbe",
    "RunView",
    "SectionChange",
    "SettingsStore",
    "StoredMessages",
    "TaskDocumentStore",
    "TaskLedgerStore",
    "Transacted",
    "Untouched",
    "archived_file_path",
    "changed",
    "deleted_path",
    "files_named",
    "kept_out",
    "next_version",
]

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


def deleted_path(user_id: str, conversation_id: str) -> tuple[str, ...]:
    """Where the tombstone of the user's deleted conversation is (server-only)."""
    return (user_id, "server", "deletedConversations", conversation_id)


def archived_file_path(user_id: str, conversation_id: str, path: str) -> tuple[str, ...]:
    """Where the index keeps ``path`` of the user's copy of ``conversation_id``
    (server-only; the id is a hash, as a path may hold any character)."""
    key = hashlib.sha256(f"{conversation_id}\n{path}".encode()).hexdigest()
    return (user_id, "server", "archivedFiles", key)


@dataclass(frozen=True, slots=True)
class Untouched:
    """A conversation (one user's copy) last changed at ``updated_at``: what a
    retention sweep finds (``ConversationStore.untouched``)."""

    user_id: str
    conversation_id: str
    updated_at: datetime


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
    conversation instead, for each stream, cost CPU per stream on every streaming write,
    growing with the conversation (``bench/stream_overhead.py`` (e) measures both ways).
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

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[str]:
        """One page of the ids of the user's conversations, in id order: those after
        ``after`` (from the first, ``None``), at most ``limit``. Nothing but ids is read,
        so a page costs the same whatever the conversations hold.

        Raises:
            StoreError: the store failed.
        """
        ...

    def size(self, user_id: str, conversation_id: str) -> int | None:
        """The stored size of the version this store last wrote or read, if it knows it
        (cheap: no read, no serialisation); ``None`` otherwise."""
        ...

    async def delete(
        self,
        user_id: str,
        conversation_id: str,
        now: datetime,
        *,
        untouched_before: datetime | None = None,
    ) -> list[str]:
        """Delete the conversation, leaving its tombstone (``DeletedConversation``, in
        the same commit), then its archive segments and their file index entries;
        every path of a file its messages (live and archived) named, once each, for the
        caller to delete the files. Idempotent: for a conversation deleted already,
        what is left of it is deleted (``[]``, or the files its leftover segments name).

        The document is deleted on the condition that it is the version read (its
        messages are all those whose files are returned); every write after it is
        refused, as every write is conditioned on the document existing: ``mutate``
        and ``apply`` raise ``NotFound``, and so do ``archive`` and ``index``. With
        ``untouched_before`` (a retention sweep), that version must also have been last
        changed before then: a conversation touched since is kept, whichever process
        touched it (the precondition makes a write between the read and the delete
        send the delete back to a fresh read).

        Raises:
            NotFound: this user has no conversation with this id, and deleted none.
            ConversationTouched: ``untouched_before`` was given and the conversation
                was changed at or after it (nothing was deleted).
            StoreError: the store failed (what was deleted stays deleted; again
                deletes the rest).
        """
        ...

    async def untouched(self, before: datetime, limit: int) -> list[Untouched]:
        """Every user's conversations (each user's copy) last changed before
        ``before``, least recently changed first, at most ``limit``: one page of a
        retention sweep (one query across users, on ``updatedAt``). A page deleted,
        the next call finds the next; one touched meanwhile is found no more.

        Raises:
            StoreError: the store failed.
        """
        ...

    async def archive(self, user_id: str, segment: ArchiveSegment) -> None:
        """Write (or rewrite: a move that died half-way is redone) one archive segment,
        and index the files its messages name (``index``) before or with it, on the
        condition that the conversation exists.

        Raises:
            NotFound: the conversation does not exist (nothing was written).
            StoreError: the store failed.
        """
        ...

    async def index(self, user_id: str, segment: ArchiveSegment) -> None:
        """Add ``segment`` to the file index (``ArchivedFile``, server-only): for each
        path its messages name (``files_named``), this segment's number. Idempotent.

        Raises:
            NotFound: the conversation does not exist (nothing was written).
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
