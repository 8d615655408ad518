"""``RunSlots``: a run's place among its user's run slots, taken and freed in the user's
ledger (``/{userId}/server``), below the agent that holds it (``shared/agent/run/slot.py``).

Every model call of a run passes the admission first (``admit_run``, or a send's admission
in the same commit as its message, ``admit_and_open``); the place is freed, counting the
run's tokens, however the run ends (``release_run``, or in the same commit as the run's
final write, ``close_and_release``, which saves a message one commit). The budget's pure
changes (``shared/budget``: ``allowance.admit_run``, ``allowance.release_run``,
``voice_grants.redeem_voice``) decide; the stores write. A freed place names the runs
that waited for one: the caller hands them to tasks (the queue is above the store).

A run's slot holds no task, so no task's section follows these ledger changes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from shared.budget.allowance import UserLimits, admit_run, release_run
from shared.budget.voice_grants import redeem_voice
from shared.clock import Clock
from shared.errors import RateLimited
from shared.schemas.documents import Conversation
from shared.schemas.server import TaskLedger
from shared.store.ledgers import OpeningStore, TaskLedgerStore

Woken = list[tuple[str, str]]
"""The runs that waited for a slot and may now have one: ``(conversation id, run id)``."""


class RunSlots:
    """The run slots of every user, kept in their ledgers; one per process."""

    def __init__(
        self,
        ledger: TaskLedgerStore,
        openings: OpeningStore,
        clock: Clock,
        limits: UserLimits,
    ) -> None:
        self._ledger = ledger
        # The ledger with one conversation, in one commit (``admit_and_open``,
        # ``close_and_release``).
        self._openings = openings
        self._clock = clock
        self._limits = limits

    def _admission(
        self,
        ledger: TaskLedger,
        run_id: str,
        conversation_id: str,
        now: datetime,
        voice_session: str | None,
        wait: bool = False,
    ) -> tuple[TaskLedger, RateLimited | None]:
        """The one admission's pure change: ``redeem_voice`` first for a voice message,
        then the ledger's ``admit_run`` (slots and tokens; it raises a refusal, or with
        ``wait`` returns it)."""
        if voice_session is not None:
            ledger = redeem_voice(ledger, voice_session, conversation_id, now)
        return admit_run(ledger, run_id, conversation_id, now, self._limits, wait)

    async def admit_run(
        self,
        user_id: str,
        run_id: str,
        conversation_id: str,
        wait: bool = False,
        voice_session: str | None = None,
    ) -> None:
        """Take one of the user's run slots (or join the conversation's), and check
        today's tokens; a voice message's ``voice_session`` is redeemed in the same
        write (``VoiceSessionNotFound``, ``VoiceSessionEnded``, ``VoiceSessionUsed``).

        Raises:
            SlotsTaken: every slot is taken; with ``wait`` the run is recorded as
                waiting for one, otherwise nothing was written.
            RateLimited: today's tokens are spent; nothing was written.
            StoreError: the store failed.
        """
        now = self._clock.now()

        def change(ledger: TaskLedger) -> tuple[TaskLedger, RateLimited | None]:
            return self._admission(ledger, run_id, conversation_id, now, voice_session, wait)

        _, refused = await self._ledger.apply(user_id, change)
        if refused is not None:
            raise refused

    async def admit_and_open(
        self,
        user_id: str,
        run_id: str,
        conversation_id: str,
        opening: Callable[[Conversation | None], Conversation],
        *,
        new: bool,
        voice_session: str | None = None,
        reserve: int = 0,
    ) -> Conversation:
        """``admit_run``'s change and ``opening`` (a pure change given the conversation as
        stored, ``None`` if there is none, that opens the run or queues its message) in
        one commit (``OpeningStore``): both land, or neither does. A run left waiting,
        queued, takes no slot; its claim admits it when its turn comes. ``new``: the
        conversation's id was just made (it is not read first). ``reserve`` as in
        ``ConversationStore.mutate``.

        Returns:
            The conversation as written.

        Raises:
            SlotsTaken, RateLimited, VoiceSessionNotFound, VoiceSessionEnded,
                VoiceSessionUsed: as ``admit_run`` (nothing was written).
            What ``opening`` raises (nothing was written).
            ConversationTooLarge, StoreError: as ``ConversationStore.mutate``.
        """
        now = self._clock.now()

        def change(
            ledger: TaskLedger, conversation: Conversation | None
        ) -> tuple[TaskLedger, Conversation, None]:
            admitted, _ = self._admission(ledger, run_id, conversation_id, now, voice_session)
            opened = opening(conversation)
            active = opened.active_run
            if active is None or active.run_id != run_id:
                admitted = ledger  # it waits, queued
            return admitted, opened, None

        conversation, _ = await self._openings.open(
            user_id, conversation_id, change, new=new, reserve=reserve
        )
        return conversation

    async def release_run(self, user_id: str, run_id: str, tokens: int) -> Woken:
        """Free the run's place (if it took one) and count its tokens against today's
        (idempotent). Returns the runs to wake.

        Raises:
            StoreError: the store failed (the slot lapses by itself, ``UserLimits.slot``).
        """
        now = self._clock.now()

        def change(ledger: TaskLedger) -> tuple[TaskLedger, Woken]:
            return release_run(ledger, run_id, now, tokens, self._limits)

        _, woken = await self._ledger.apply(user_id, change)
        return woken

    async def close_and_release(
        self,
        user_id: str,
        run_id: str,
        conversation_id: str,
        closing: Callable[[Conversation | None], Conversation],
        tokens: int,
        *,
        reserve: int = 0,
    ) -> tuple[Conversation, Woken]:
        """``closing`` (a run's final write: a pure change given the conversation as
        stored) and ``release_run``'s change in one commit: both land, or neither does (then
        the run's place is still taken: ``release_run`` frees it). ``reserve`` as in
        ``ConversationStore.mutate``.

        Returns:
            The conversation as written, and the runs to wake.

        Raises:
            What ``closing`` raises (nothing was written).
            ConversationTooLarge, StoreError: as ``ConversationStore.mutate``.
        """
        now = self._clock.now()

        def change(
            ledger: TaskLedger, conversation: Conversation | None
        ) -> tuple[TaskLedger, Conversation, Woken]:
            released, woken = release_run(ledger, run_id, now, tokens, self._limits)
            return released, closing(conversation), woken

        return await self._openings.open(
            user_id, conversation_id, change, new=False, reserve=reserve
        )
