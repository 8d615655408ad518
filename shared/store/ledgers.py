"""The storage interface of each user's task ledger, its tasks' sections, and a send's
admission with its message (openings)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from shared.schemas.documents import Conversation, TaskDocument
from shared.schemas.server import TaskLedger

R = TypeVar("R")

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

    async def listing(self, user_id: str, after: str | None, limit: int) -> list[TaskDocument]:
        """One page of the user's sections, in task id order: those after ``after`` (from
        the first, ``None``), at most ``limit`` (a section is small: ~1-20 KB).

        Raises:
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

    async def delete(self, user_id: str, conversation_id: str) -> int:
        """Delete every section of the conversation's tasks (a query on
        ``conversationId``); how many. Idempotent.

        Raises:
            StoreError: the store failed (again deletes the rest).
        """
        ...
