"""Opening, stopping and watching over runs (``RunService``), behind the ``Agent``
facade (``facade.py``) that the HTTP edge and the tasks function talk to.

Every run is a record in the conversation document (``runs.py``); this module makes
the writes that open and close those records and hands a ``Run`` what it needs
(``RunDeps``) to produce the reply. A delayed Cloud Task, the watchdog, is scheduled
before any run opens: when it fires it closes the run if its producer died, produces
it if nobody did, or looks again when the run's lease next lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Literal

from shared.agent.background import Background
from shared.agent.deps import RunDeps
from shared.agent.head_start import HeadStart
from shared.agent.history import steps_since_user
from shared.agent.loop import Run
from shared.agent.runs import (
    BUSY,
    abandon_run,
    check_queue,
    claim_queued_run,
    close_stale_run,
    follow_up_run,
    hold_queued,
    new_run,
    open_follow_up,
    open_run,
    refuse_queued,
    renew_queued,
    request_stop,
)
from shared.attachments.service import Attachments, Requested
from shared.attachments.voice import Listened, Listener, VoiceClips
from shared.auth.base import User
from shared.errors import (
    AlreadyAnswered,
    ConversationTooLarge,
    NotFound,
    RateLimited,
    RunInProgress,
    SlotsTaken,
    SparkError,
    StoreError,
)
from shared.ids import IdGenerator
from shared.queue.port import TaskPort
from shared.schemas.documents import (
    ActiveRun,
    Author,
    ContentPart,
    Conversation,
    Message,
    MessageError,
    Usage,
)
from shared.store.base import LessonStore, reserved
from shared.store.limits import CLOSING_RESERVE

log = logging.getLogger(__name__)
# How long a user refused a reply goes without head starts (``RunService._refused``).
_REFUSED_FOR = timedelta(seconds=60)

WhenBusy = Literal["reject", "queue"]

WAITING = (
    "Spark AI Agent is writing as many replies for you as it may at once; this one "
    "starts as soon as one of them ends."
)


@dataclass(frozen=True, slots=True)
class Hearing:
    """A voice message admitted and its clip decoded, to be transcribed while its client
    watches (SSE): ``finish`` transcribes it, telling ``listener`` each piece, then opens
    its run as ``send`` does (its refusals included); it frees the run's place itself
    should it fail."""

    run_id: str
    user_message_id: str
    finish: Callable[[Listener], Awaitable[Sent]]


@dataclass(frozen=True, slots=True)
class Sent:
    """What a send did: a run to produce now (``run``), the reply handed to a task
    (neither), the message ``queued`` behind a live run, or (a voice message streamed)
    a ``hearing`` to finish first."""

    conversation_id: str
    user_message_id: str
    run: Run | None
    queued: bool = False
    hearing: Hearing | None = None


@dataclass(frozen=True, slots=True)
class _Draft:
    """A message being sent, from its admission to its run's opening."""

    user: User
    conversation_id: str
    new: bool
    message: Message
    record: ActiveRun
    text: str
    when_busy: WhenBusy
    background: bool
    voice_session: str | None = None


class _Lapsed(Exception):
    """The conversation's active run's lease lapsed: it is closed (or, queued, renewed
    and handed on) in a write of its own before the message is appended."""


@dataclass(frozen=True, slots=True)
class Stopped:
    run_id: str | None
    status: Literal["stopping", "stopped"]


class RunService:
    """Opens, claims, stops and watches over runs; one per process, behind ``Agent``."""

    def __init__(
        self,
        deps: RunDeps,
        ids: IdGenerator,
        scheduler: TaskPort,
        lessons: LessonStore,
        attachments: Attachments,
        background: Background,
        voice: VoiceClips | None = None,
    ) -> None:
        self._deps = deps
        self._ids = ids
        self._scheduler = scheduler
        self._lessons = lessons
        self._attachments = attachments
        self._background = background
        self._voice = voice or VoiceClips(deps.files, deps.model, 0)
        # Users this process saw refused a reply (a limit), and when: their next sends
        # get no head start for a while, so a user past a limit does not have each
        # refused send's prompt go to the provider first. A guess, in this process only:
        # it only ever withholds a head start, never decides a send.
        self._refused: dict[str, datetime] = {}

    @property
    def model(self) -> str:
        """The label of the model that answers (what each reply records as its model)."""
        return self._deps.model.label

    def lease(self) -> timedelta:
        """How long a run's (or a queued run's) lease lasts from when it is written."""
        return self._deps.limits.lease

    def _run(
        self,
        user_id: str,
        conversation: Conversation,
        record: ActiveRun,
        head_start: HeadStart | None = None,
    ) -> Run:
        steps = steps_since_user(conversation.messages)
        return Run(self._deps, user_id, conversation, record, steps, head_start)

    def _may_start_early(self, user_id: str) -> bool:
        """No head start for a user refused here within ``_REFUSED_FOR``."""
        now = self._deps.clock.now()
        self._refused = {u: t for u, t in self._refused.items() if now - t < _REFUSED_FOR}
        return user_id not in self._refused

    def _start_early(self, draft: _Draft) -> asyncio.Task[HeadStart | None]:
        """Ask the model for ``draft``'s reply now, while its admission and its message
        are written: those commits are then off the first token's time
        (bench/stream_overhead.py (a) measures it)."""
        return asyncio.create_task(self._head_start(draft))

    async def _head_start(self, draft: _Draft) -> HeadStart | None:
        """The first model request of ``draft``'s run, sent on the conversation its
        opening should leave (a new one: fully known; an existing one: read now, a guess
        the run checks against what is committed). ``None``: no good guess."""
        user_id, message, record = draft.user.uid, draft.message, draft.record
        try:
            if draft.new:
                guess = _new_conversation(draft.user, draft.conversation_id, message, record)
            else:
                stored = await self._deps.store.get(user_id, draft.conversation_id)
                if stored is None:
                    return None
                queue = self._deps.limits.queue
                guess = open_run(stored, message, record, draft.when_busy, queue)
            active = guess.active_run
            if active is None or active.run_id != record.run_id:
                return None  # it would wait, queued
            request = await self._run(user_id, guess, record).first_request()
        except Exception as exc:  # only a head start lost: the run asks once opened
            log.debug("run %s: no head start (%s)", record.run_id, exc)
            return None
        spend = partial(self._spend, user_id)
        return HeadStart(request, await self._deps.model.chat(user_id, request), spend)

    async def _spend(self, user_id: str, usage: Usage) -> None:
        """Count what a discarded head start had used (it was no run's): rare, as a
        request cancelled before its finish reports nothing."""
        try:
            meter = self._scheduler.meter(user_id)
            reservation = await meter.reserve(0, "chat")
            await meter.settle(reservation, usage.input_tokens + usage.output_tokens)
        except Exception:
            log.warning("%s: a head start's tokens went uncounted", user_id, exc_info=True)

    @staticmethod
    async def _drop(early: asyncio.Task[HeadStart | None] | None) -> None:
        """Cancel a head start whose run will not stream here (refused, failed, queued)."""
        if early is None:
            return
        early.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            head = await early
            if head is not None:
                await head.discard()

    async def watchdog(self, user_id: str, conversation_id: str, record: ActiveRun) -> None:
        """Have a task check on ``record`` once its lease lapses (a queue that refuses
        is logged: the next send or stop in the conversation closes a dead run too)."""
        try:
            await self._scheduler.enqueue_watchdog(user_id, conversation_id, record)
        except SparkError as exc:
            # The next send closes a dead run too (``open_run``); say so and go on.
            log.warning("run %s: no watchdog (%s)", record.run_id, exc)

    async def send(
        self,
        user: User,
        text: str,
        conversation_id: str | None,
        *,
        background: bool = False,
        when_busy: WhenBusy = "reject",
        document_id: str | None = None,
        attachments: Sequence[Requested] = (),
        voice_session: str | None = None,
        voice: str | None = None,
        listening: bool = False,
    ) -> Sent:
        """Persist the user's message and open its run (the model is not called yet);
        with ``when_busy="queue"`` a live run makes the message wait its turn instead.

        With ``background`` a Cloud Task produces the reply (the ``202`` mode).
        ``document_id`` names the lesson open in the user's editor: from this message
        on, the document tools work on it. ``attachments`` are checked, all of them,
        before anything is written; they are read and decoded only once no user limit
        and no live run refuses the send. ``voice_session`` makes it a voice message
        (``input: "voice"``: the transcript of an utterance of that live-audio session),
        the session redeemed by the admission. ``voice`` (a clip's path) is checked
        with the attachments, then read and transcribed after the admission; its transcript
        is the message's text (``text``, if any, follows it) and the clip a ``file`` part.
        With ``listening`` (SSE) the transcription is left to the ``Sent``'s ``hearing``,
        so that its client sees each piece as it comes.

        Raises:
            NotFound: ``conversation_id`` is not one of this user's conversations, or
                ``document_id`` not one of their lessons, or an attachment is missing.
            RequestError: an attachment or the voice clip breaks a rule (400, 403, 413,
                415, 422; it is named); no words in the clip (``NoSpeech``); voice with
                no provider to transcribe it (``VoiceUnavailable``).
            RunInProgress: that conversation has a live run and ``when_busy`` is reject.
            QueueUnavailable: (``background``) the reply could not be handed to a task.
        """
        if conversation_id is not None:
            await self._refuse_at_once(user.uid, conversation_id, when_busy)
        if document_id is not None and await self._lessons.get(user.uid, document_id) is None:
            raise NotFound("No lesson with this documentId.")
        # Only what needs no download here: a refused send must not read the files.
        checked = await self._attachments.check(user.uid, attachments) if attachments else []
        clip = await self._voice.check(user.uid, voice) if voice is not None else None
        now = self._deps.clock.now()
        user_message = Message(
            id=self._ids.new("msg"),
            role="user",
            author=Author(user_id=user.uid, display_name=user.name),
            created_at=now,
            status="complete",
            content=[ContentPart.of_text(text)] if text else [],
            document_id=document_id,
            input="voice" if voice_session is not None else None,
        )
        record = new_run(
            self._ids.new("run"),
            self._ids.new("msg"),
            now,
            now + self.lease(),
            user_message.id,
            status="queued" if background else "streaming",
            model=None if background else self._deps.model.label,
        )
        new = conversation_id is None
        draft = _Draft(
            user,
            conversation_id or self._ids.new("conv"),
            new,
            user_message,
            record,
            text,
            when_busy,
            background,
            voice_session,
        )

        # Only a message whose request is known before anything is read or decoded.
        plain = not (background or checked or clip) and self._may_start_early(user.uid)
        early = self._start_early(draft) if plain else None
        if early is not None:
            # The model's request goes first, the opening's commit after: the head start
            # task builds the request and starts its pump, which sends it (or waits for a
            # connection), one loop turn each. Left to run behind the opening's own CPU
            # (reading the ledger, encoding the commit), the request would leave later;
            # the commit starts a little later instead, which costs the reply nothing
            # (bench/stream_overhead.py (a), time to first token).
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        if not (checked or clip):
            # Nothing to read first: its admission and its message in one commit.
            return await self._open_draft(draft, early, admitted=False)
        # A per-user limit refuses the send before its files are read.
        try:
            await self.admit(
                user.uid, record.run_id, draft.conversation_id, voice_session=voice_session
            )
        except RateLimited:
            self._refused[user.uid] = self._deps.clock.now()
            await self._drop(early)
            raise
        except BaseException:
            await self._drop(early)
            raise
        try:
            if (checked or clip) and not new:
                await self._refuse_early(user.uid, draft.conversation_id, user_message, when_busy)
            # The clip first: refused (silent, too long), it leaves no derived file.
            listened = await self._voice.listen(clip) if clip is not None else None
            files = await self._attachments.derive(checked) if checked else []
        except BaseException:
            await self._scheduler.release_run(user.uid, record.run_id, 0)
            raise
        draft = _with_parts(draft, files)
        if listened is None:
            return await self._open_draft(draft, early, admitted=True)
        if listening:
            hearing = Hearing(
                record.run_id,
                user_message.id,
                lambda listener: self._hear(draft, listened, listener),
            )
            return Sent(draft.conversation_id, user_message.id, None, hearing=hearing)
        return await self._hear(draft, listened, None)

    async def _hear(self, draft: _Draft, listened: Listened, listener: Listener | None) -> Sent:
        """Transcribe a voice message's clip, then open its run (its place freed should
        either fail)."""
        user_id, run_id = draft.user.uid, draft.record.run_id
        try:
            heard = await self._voice.transcribe(user_id, listened.clip, listener)
            text = heard if not draft.text else f"{heard}\n\n{draft.text}"
            # Dated from now: the transcription took some of the run's lease.
            now = self._deps.clock.now()
            typed = draft.message.content[1:] if draft.text else draft.message.content
            content = [ContentPart.of_text(text), listened.part, *typed]
            message = draft.message.model_copy(update={"content": content, "created_at": now})
            old = draft.record
            record = new_run(
                old.run_id,
                old.assistant_message_id,
                now,
                now + self.lease(),
                message.id,
                status="queued" if draft.background else "streaming",
                model=None if draft.background else self._deps.model.label,
            )
            draft = dataclasses.replace(draft, message=message, record=record)
        except BaseException:
            await self._scheduler.release_run(user_id, run_id, 0)
            raise
        return await self._open_draft(draft, admitted=True)

    async def _open_draft(
        self,
        draft: _Draft,
        early: asyncio.Task[HeadStart | None] | None = None,
        *,
        admitted: bool,
    ) -> Sent:
        """Open ``draft``'s run (or queue its message): ``admitted`` already (its place
        is freed should the opening fail, or leave it waiting), or admitted in the same
        commit (``TaskPort.admit_and_open``: refused, nothing is written). ``early``: its
        head start, cancelled unless the run opens here."""
        user, record, user_message = draft.user, draft.record, draft.message
        try:
            if admitted:
                conversation = await self._open(draft)
            else:
                conversation = await self._admit_and_open(draft)
        except BaseException:
            await self._drop(early)
            if admitted:
                await self._scheduler.release_run(user.uid, record.run_id, 0)
            raise
        active = conversation.active_run
        if active is None or active.run_id != record.run_id:
            await self._drop(early)
            if admitted:  # it waits, queued (admitted with its message, it took no slot)
                await self._scheduler.release_run(user.uid, record.run_id, 0)
            return Sent(conversation.id, user_message.id, None, queued=True)
        if draft.background:  # (no head start: a task asks the model)
            await self._drop(early)
            await self.hand_to_task(user.uid, conversation.id, record)
            return Sent(conversation.id, user_message.id, None)
        # Asked for while the run starts (not before its first token): should the
        # process die first, the next send or stop in the conversation closes the run.
        # Before the head start is awaited, so the committed run has its watchdog even
        # should this request be cancelled in that wait.
        self._background.spawn(self.watchdog(user.uid, conversation.id, record))
        head = await early if early is not None else None
        run = self._run(user.uid, conversation, record, head)
        return Sent(conversation.id, user_message.id, run)

    async def _refuse_at_once(
        self, user_id: str, conversation_id: str, when_busy: WhenBusy
    ) -> None:
        """Refuse, before the admission writes to the user's ledger, a send to a
        conversation that does not exist or (``when_busy="reject"``) has a live run,
        judged on a fresh cheap read of its active run (``probe``: no messages read).
        ``open_run`` judges the live run again in its own write.

        Raises:
            NotFound: no such conversation for this user (a reserved id included: as a
                ledger key Firestore would refuse it, a 503 rather than a 404).
            RunInProgress: the conversation has a live run.
        """
        if reserved(conversation_id):
            raise NotFound("No conversation with this id.")
        probe = await self._deps.store.probe(user_id, conversation_id)
        if when_busy == "reject" and probe.live(self._deps.clock.now()):
            raise RunInProgress(BUSY)

    async def _refuse_early(
        self, user_id: str, conversation_id: str, user_message: Message, when_busy: WhenBusy
    ) -> None:
        """Refuse before the attachments are read what ``open_run`` would refuse after:
        a live run (one whose producer died is closed first), or, for a message that
        would wait, a full queue (judged on its text; its files only add to it).
        ``open_run`` judges again in its own write; this read only spares the work (a
        40 MP image: 0.6 s, 290 MB).

        Raises:
            NotFound: no such conversation for this user.
            RunInProgress: the conversation has a live run.
            RateLimited: the conversation's queue is full.
        """
        conversation = await self.close_if_dead(user_id, conversation_id)
        if conversation.active_run is None:
            return
        if when_busy == "reject":
            raise RunInProgress(BUSY)
        check_queue(conversation.queued_messages or [], user_message, self._deps.limits.queue)

    def _opening(
        self, draft: _Draft, lapsed_by: datetime | None = None
    ) -> Callable[[Conversation | None], Conversation]:
        """The pure change that appends ``draft``'s message (or makes its conversation),
        given the conversation as stored (``None``: there is none); with ``lapsed_by``,
        it raises ``_Lapsed`` for an active run whose lease lapsed by then."""
        user, conversation_id = draft.user, draft.conversation_id
        message, record, queue = draft.message, draft.record, self._deps.limits.queue

        def opening(stored: Conversation | None) -> Conversation:
            if draft.new:
                if stored is not None:
                    raise StoreError(f"conversation {conversation_id} already exists")
                return _new_conversation(user, conversation_id, message, record)
            if stored is None:
                raise NotFound("No conversation with this id.")
            active = stored.active_run
            if lapsed_by is not None and active and active.lease_expires_at <= lapsed_by:
                raise _Lapsed(active.run_id)
            return open_run(stored, message, record, draft.when_busy, queue)

        return opening

    async def _open(self, draft: _Draft) -> Conversation:
        """Append ``draft``'s message, once admitted (its own commit)."""
        user_id, conversation_id = draft.user.uid, draft.conversation_id
        opening = self._opening(draft)
        if draft.new:
            conversation = opening(None)
            await self._deps.store.create(user_id, conversation)
            return conversation
        await self.close_if_dead(user_id, conversation_id)
        return await self._deps.store.mutate(
            user_id,
            conversation_id,
            opening,
            reserve=CLOSING_RESERVE,  # new content: closing a run must still find room
        )

    async def _admit_and_open(self, draft: _Draft) -> Conversation:
        """Admit ``draft``'s run and append its message in one commit (one commit where
        there were two, the admission's then the message's: one round trip less before
        the first token, bench/stream_overhead.py (a)).

        Raises:
            RateLimited: a user limit (this user then gets no head start for a while),
                or the conversation's queue is full.
            RunInProgress, NotFound: as ``open_run``.
        """
        try:
            return await self._commit(draft, self._opening(draft, self._deps.clock.now()))
        except _Lapsed:
            # Admitted, but a run whose producer died is in the way: it is closed first,
            # in its own write (a change that raises writes nothing: it cannot close and
            # refuse at once), and the send judged again (any run there now is live).
            await self.close_if_dead(draft.user.uid, draft.conversation_id)
        return await self._commit(draft, self._opening(draft))

    async def _commit(
        self, draft: _Draft, opening: Callable[[Conversation | None], Conversation]
    ) -> Conversation:
        """``TaskPort.admit_and_open`` with ``opening``; a user refused a limit (not a full
        queue) gets no head start for a while."""
        user_id = draft.user.uid
        refused_here: list[BaseException] = []

        def judged(stored: Conversation | None) -> Conversation:
            try:
                return opening(stored)
            except BaseException as exc:
                refused_here.append(exc)
                raise

        try:
            return await self._scheduler.admit_and_open(
                user_id,
                draft.record.run_id,
                draft.conversation_id,
                judged,
                new=draft.new,
                voice_session=draft.voice_session,
                reserve=CLOSING_RESERVE,  # new content: closing a run must still find room
            )
        except RateLimited as exc:
            if not any(exc is mine for mine in refused_here):  # a user limit
                self._refused[user_id] = self._deps.clock.now()
            raise

    async def hand_to_task(self, user_id: str, conversation_id: str, record: ActiveRun) -> None:
        """Have a Cloud Task produce the queued run just opened (with its watchdog).

        Raises:
            QueueUnavailable: the queue refused it; the run was closed as an error, so
                nothing waits for a reply that will not come.
        """
        try:
            await asyncio.gather(
                self.watchdog(user_id, conversation_id, record),
                self._scheduler.enqueue_reply(user_id, conversation_id, record.run_id),
            )
        except SparkError as exc:
            error = MessageError(code=exc.code, message=exc.message)
            now = self._deps.clock.now()
            later = now + self.lease()
            await self._deps.store.mutate(
                user_id,
                conversation_id,
                lambda c: abandon_run(c, record.run_id, error, now, later),
            )
            await self._scheduler.release_run(user_id, record.run_id, 0)
            raise

    async def close_if_dead(self, user_id: str, conversation_id: str) -> Conversation:
        """Close the active run if its lease lapsed (no write when it has not)."""
        now = self._deps.clock.now()
        lease_until = now + self.lease()

        def close(conversation: Conversation, cut: bool = False) -> tuple[Conversation, str | None]:
            before = conversation.active_run.run_id if conversation.active_run else None
            closed = close_stale_run(conversation, now, lease_until, cut=cut)
            return renew_queued(closed, now, lease_until), before

        try:
            conversation, before = await self._deps.store.apply(user_id, conversation_id, close)
        except ConversationTooLarge:
            # Full: close it all the same, keeping a note instead of its text.
            conversation, before = await self._deps.store.apply(
                user_id, conversation_id, lambda c: close(c, cut=True)
            )
        active = conversation.active_run
        if before is not None and (active is None or active.run_id != before):
            await self._scheduler.release_run(user_id, before, 0)  # its producer died
        # It opened the next queued message, or found a queued run nobody took: hand on.
        handed = active is not None and active.status == "queued"
        if (
            handed
            and active is not None
            and (active.run_id != before or active.lease_expires_at == lease_until)
        ):
            await self.hand_on(user_id, conversation)
        return conversation

    async def admit(
        self,
        user_id: str,
        run_id: str,
        conversation_id: str,
        *,
        wait: bool = False,
        voice_session: str | None = None,
    ) -> None:
        """Let a run call the model, within the user's limits: every model call of a run
        passes here first, a new message's in ``send`` and every other's in ``claim``
        (queued messages, ``202`` replies, follow-ups to task results and to people's
        answers, approvals and client tools). The run takes one of the user's slots, or
        joins its conversation's, while today's tokens last; it frees its place when it
        ends, counting its tokens (``release_run``), however it ends.

        Raises:
            SlotsTaken: every slot is taken (with ``wait``, the run is recorded as
                waiting, and handed to a task again as soon as a slot frees).
            RateLimited: today's tokens are spent.
            VoiceSessionNotFound, VoiceSessionEnded, VoiceSessionUsed: (a voice
                message) its session cannot be redeemed here; nothing was written.
        """
        await self._scheduler.admit_run(
            user_id, run_id, conversation_id, wait=wait, voice_session=voice_session
        )

    async def claim(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """A queued run, admitted and claimed for this delivery (``None``: taken care of
        already, waiting for a slot, or ended because today's tokens are spent)."""
        try:
            await self.admit(user_id, run_id, conversation_id, wait=True)
        except SlotsTaken:
            await self._hold(user_id, conversation_id, run_id)
            return None
        except RateLimited as exc:
            await self._refuse(user_id, conversation_id, run_id, exc)
            return None
        lease_until = self._deps.clock.now() + self.lease()
        label = self._deps.model.label
        try:
            conversation = await self._deps.store.mutate(
                user_id,
                conversation_id,
                lambda c: claim_queued_run(c, run_id, lease_until, label),
            )
        except AlreadyAnswered:
            # Another delivery produces it (its place stays), or it was closed.
            await self._release_if_over(
                user_id, await self._deps.store.get(user_id, conversation_id), run_id
            )
            return None
        except BaseException:
            await self._scheduler.release_run(user_id, run_id, 0)
            raise
        record = conversation.active_run
        assert record is not None
        return self._run(user_id, conversation, record)

    async def _hold(self, user_id: str, conversation_id: str, run_id: str) -> None:
        """Keep a queued run refused a slot queued, saying why; a slot that frees wakes
        it (``release_run``), and its watchdog tries it again should that be lost."""
        lease_until = self._deps.clock.now() + self.lease()
        conversation = await self._deps.store.mutate(
            user_id, conversation_id, lambda c: hold_queued(c, run_id, WAITING, lease_until)
        )
        active = conversation.active_run
        if active is not None and active.run_id == run_id and active.status == "queued":
            await self.watchdog(user_id, conversation_id, active)

    async def _refuse(
        self, user_id: str, conversation_id: str, run_id: str, refused: RateLimited
    ) -> None:
        """End a queued run with the refusal the user reads in its message, and hand on
        the next queued message (refused in turn, each with its own reply)."""
        error = MessageError(code=refused.code, message=refused.message)
        now = self._deps.clock.now()
        later = now + self.lease()
        conversation = await self._deps.store.mutate(
            user_id, conversation_id, lambda c: refuse_queued(c, run_id, error, now, later)
        )
        await self._release_if_over(user_id, conversation, run_id)
        await self.hand_on(user_id, conversation)

    async def _release_if_over(
        self, user_id: str, conversation: Conversation | None, run_id: str
    ) -> None:
        """Free ``run_id``'s place unless it is the conversation's live run (a 202 send
        took it at once; an admission may have taken it again for a run now over)."""
        active = conversation.active_run if conversation is not None else None
        if active is None or active.run_id != run_id:
            await self._scheduler.release_run(user_id, run_id, 0)

    async def follow_up(self, user_id: str, conversation_id: str, source: Message) -> Run | None:
        """Open the agent's follow-up to the results of the calls in ``source``, queued,
        and claim it here (``None``: it exists already, waits for a slot, or was refused
        for today's tokens; its message says so).

        Raises:
            RunInProgress: another run is live in the conversation; try later.
        """
        now = self._deps.clock.now()
        record = follow_up_run(source.id, now, now + self.lease(), queued=True, model=None)
        await self.close_if_dead(user_id, conversation_id)
        try:
            await self._deps.store.mutate(
                user_id, conversation_id, lambda c: open_follow_up(c, record)
            )
        except AlreadyAnswered:
            return None
        # Should this process stop before the follow-up starts, its watchdog produces it.
        await self.watchdog(user_id, conversation_id, record)
        return await self.claim(user_id, conversation_id, record.run_id)

    async def stop(self, user_id: str, conversation_id: str) -> Stopped:
        """Stop the conversation's active run wherever it runs, and its tasks that have
        not started.

        Raises:
            NotFound: no such conversation for this user.
            NoActiveRun: nothing to stop.
        """
        now = self._deps.clock.now()
        before = await self._deps.store.get(user_id, conversation_id)
        run_id = before.active_run.run_id if before and before.active_run else None
        conversation = await self._deps.store.mutate(
            user_id, conversation_id, lambda c: request_stop(c, now, now + self.lease())
        )
        cancelled = [
            task_id
            for task_id, state in (conversation.tasks or {}).items()
            if state.status == "cancelled"
        ]
        if cancelled:
            await self._scheduler.cancel(user_id, cancelled)
        await self.hand_on(user_id, conversation)
        active = conversation.active_run
        if active is not None and active.run_id == run_id and active.status == "stopping":
            return Stopped(run_id, "stopping")
        if run_id is not None:
            await self._scheduler.release_run(user_id, run_id, 0)  # closed here, at once
        return Stopped(run_id, "stopped")

    async def hand_on(self, user_id: str, conversation: Conversation) -> None:
        """If ``conversation`` now has a queued run (the next queued message), have a task
        produce it."""
        active = conversation.active_run
        if active is not None and active.status == "queued":
            await self._scheduler.hand_on(user_id, conversation.id, active)

    async def supervise(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """The watchdog: close ``run_id`` if its producer died, hand on what follows it,
        and look again later while it lives. Returns a run to produce here, if the run
        (or its successor) was queued and nobody took it before its lease lapsed."""
        store, now = self._deps.store, self._deps.clock.now()
        conversation = await store.get(user_id, conversation_id)
        if conversation is None:
            return None
        active = conversation.active_run
        if active is None or active.run_id != run_id:
            # Ours is over: its slot is free, however it ended (idempotent).
            await self._scheduler.release_run(user_id, run_id, 0)
        if active is None:
            await self._scheduler.sweep(user_id)
            return None
        if active.run_id != run_id and active.status != "queued":
            return None  # ours is over; the live run has its own watchdog
        if active.lease_expires_at > now:
            await self.watchdog(user_id, conversation_id, active)
            return None
        if active.status == "queued":
            # Nobody took it: produce it here, watched over like any other run.
            run = await self.claim(user_id, conversation_id, active.run_id)
            if run is not None:
                await self.watchdog(user_id, conversation_id, run.record)
            return run
        await self.close_if_dead(user_id, conversation_id)
        log.warning("run %s: closed if its producer stopped renewing its lease", active.run_id)
        await self._scheduler.sweep(user_id)
        return None


def _with_parts(draft: _Draft, parts: Sequence[ContentPart]) -> _Draft:
    """``draft`` with ``parts`` (its attachments) after its message's text."""
    if not parts:
        return draft
    content = [*draft.message.content, *parts]
    return dataclasses.replace(draft, message=draft.message.model_copy(update={"content": content}))


def _new_conversation(
    user: User, conversation_id: str, user_message: Message, record: ActiveRun
) -> Conversation:
    """The conversation a first message opens, with its run active."""
    now = record.started_at
    return Conversation(
        id=conversation_id,
        participant_ids=[user.uid],
        created_at=now,
        updated_at=now,
        last_message_at=now,
        messages=[user_message],
        active_run=record,
        document_id=user_message.document_id,
    )
