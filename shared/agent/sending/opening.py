"""Opening a user's message (``Opening.send``): refused early what would be refused
anyway, admitted within the user's limits, its files read and its clip heard, then its
run opened (or its message queued behind a live run, or its reply handed to a task).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict, Unpack

from shared.agent.run.background import Background
from shared.agent.run.deps import RunDeps
from shared.agent.run.loop import Run
from shared.agent.run.runs import BUSY, answered_turn, check_queue, new_run
from shared.agent.run.watch import Watch
from shared.agent.sending.draft import Draft, Lapsed, WhenBusy, opening, run_of, with_parts
from shared.agent.sending.head_start import Early, HeadStarts
from shared.attachments.service import Attachments, Checked, Requested
from shared.attachments.voice import CheckedClip, Listened, Listener, VoiceClips
from shared.auth.base import User
from shared.errors import AccountDeleted, NotFound, RateLimited, RunInProgress
from shared.families.messages import is_shared
from shared.ids import IdGenerator, reserved
from shared.schemas.documents import Author, ContentPart, Conversation, Message
from shared.store.base import LessonStore
from shared.store.limits import CLOSING_RESERVE

ERASED = "This account is being deleted, so nothing more can be saved for it."
NOTICE = (
    "You are talking to Spark AI Agent, which is an AI, not a person, and it can get "
    "things wrong. Your parents can see when one of your messages, or a reply to you, "
    "was stopped for safety (what kind of message and when, but not your words), and "
    "they choose your settings here, such as quiet hours and how many messages you can "
    "send each day."
)
"""The line that opens every conversation of a dependent (DESIGN §16; the UK Children's
Code asks that a child is told when a parent can see): a ``system`` message, which the
model is never given (``history.to_chat``)."""


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
    a ``hearing`` to finish first. ``body``: the SSE body producing the reply, when the
    facade's send was asked for it (``Agent.send(stream=True)``)."""

    conversation_id: str
    user_message_id: str
    run: Run | None
    queued: bool = False
    hearing: Hearing | None = None
    body: AsyncIterator[bytes] | None = None


class Sending(TypedDict, total=False):
    """How a message is sent (``Opening.send``, ``Agent.send``); each is optional.

    * ``background``: a Cloud Task produces the reply (the ``202`` mode).
    * ``when_busy``: ``reject`` (the default) refuses a send while a run is live;
      ``queue`` makes the message wait its turn.
    * ``document_id``: the lesson open in the user's editor: from this message on, the
      document tools work on it.
    * ``attachments``: checked, all of them, before anything is written; read and
      decoded only once no user limit and no live run refuses the send.
    * ``voice_session``: a voice message (``input: "voice"``: the transcript of an
      utterance of that live-audio session), the session redeemed by the admission.
    * ``voice``: a clip's path, checked with the attachments, then read and transcribed
      after the admission; its transcript is the message's text (``text``, if any,
      follows it) and the clip a ``file`` part.
    * ``create``: a ``conversation_id`` that names none of the user's conversations is
      made with it (an AI SDK chat's id is the client's choice).
    """

    background: bool
    when_busy: WhenBusy
    document_id: str | None
    attachments: Sequence[Requested]
    voice_session: str | None
    voice: str | None
    create: bool


class Opening:
    """Sends of users' messages; one per process."""

    def __init__(
        self,
        deps: RunDeps,
        ids: IdGenerator,
        watch: Watch,
        starts: HeadStarts,
        background: Background,
        lessons: LessonStore,
        attachments: Attachments,
        voice: VoiceClips,
    ) -> None:
        self._deps = deps
        self._ids = ids
        self._watch = watch
        self._starts = starts
        self._background = background
        self._lessons = lessons
        self._attachments = attachments
        self._voice = voice

    async def send(
        self,
        user: User,
        text: str,
        conversation_id: str | None,
        *,
        listening: bool = False,
        **sending: Unpack[Sending],
    ) -> Sent:
        """Persist the user's message and open its run (the model is not called yet), as
        ``sending`` says (``Sending``). With ``listening`` (SSE) a clip's transcription
        is left to the ``Sent``'s ``hearing``, so that its client sees each piece as it
        comes.

        Raises:
            NotFound: ``conversation_id`` is not one of this user's conversations, or
                ``document_id`` not one of their lessons, or an attachment is missing.
            RequestError: an attachment or the voice clip breaks a rule (400, 403, 413,
                415, 422; it is named); no words in the clip (``NoSpeech``); voice with
                no provider to transcribe it (``VoiceUnavailable``).
            RunInProgress: that conversation has a live run and ``when_busy`` is reject.
            ParentControls: a dependent's parents' controls forbid the send (nothing is
                written but, with a daily limit, the turn counted).
            QueueUnavailable: (``background``) the reply could not be handed to a task.
        """
        background = sending.get("background", False)
        when_busy = sending.get("when_busy", "reject")
        document_id = sending.get("document_id")
        attachments = sending.get("attachments", ())
        voice, voice_session = sending.get("voice"), sending.get("voice_session")
        create = sending.get("create", False)
        new = conversation_id is None
        if conversation_id is not None:
            try:
                await self._refuse(user.uid, conversation_id, when_busy)
            except NotFound:
                if not create or reserved(conversation_id):
                    raise
                new = True
        if new and user.uid in await self._deps.tombstones.erased([user.uid]):
            # A fresh read, not a memory: the erasure's last sweep deletes whatever a
            # send that raced its record's first write made (``shared/erasure/steps.py``).
            raise AccountDeleted(ERASED)
        if document_id is not None and await self._lessons.get(user.uid, document_id) is None:
            raise NotFound("No lesson with this documentId.")
        # Only what needs no download here: a refused send must not read the files.
        checked = await self._attachments.check(user.uid, attachments) if attachments else []
        clip = await self._voice.check(user.uid, voice) if voice is not None else None
        # Before the model is asked (a head start) or anything is written: a send a
        # parent's control forbids changes nothing (a fresh read of the family).
        dependent = await self._deps.guardians.admit(user.uid, voice=clip is not None)
        draft = self._draft(
            user, text, conversation_id, new, background, when_busy, document_id, voice_session
        )
        if new and dependent:
            draft = dataclasses.replace(draft, notice=self._notice(draft.message.created_at))
        if checked or clip:
            return await self._read_then_open(draft, checked, clip, listening)
        # Nothing to read first: its admission and its message in one commit, while the
        # model is asked already (only a message whose request is known before anything
        # is read or decoded).
        plain = not background and self._starts.may_start(user.uid)
        early = await self._starts.start(draft) if plain else None
        return await self._open_draft(draft, early)

    async def regenerate(
        self,
        user: User,
        conversation_id: str,
        message_id: str | None,
        *,
        background: bool = False,
    ) -> Sent:
        """Open a run that answers again the user turn of the conversation's last reply,
        ``message_id`` (``None``: whichever is last): as a send without a new message
        (the same admission, limits, budget and screen; ``background``: a Cloud Task
        produces it). Its reply is
        appended when it ends, marked ``regenerates: message_id``; the old one stays.

        Raises:
            NotFound: ``conversation_id`` is not one of this user's agent conversations.
            RunInProgress: a run is live (or a message waits) in it.
            RequestError: ``message_id`` is not its last finished reply (nothing written).
            RateLimited, QueueUnavailable: as ``send``.
        """
        if is_shared(conversation_id):
            raise NotFound("No conversation with this id.")
        await self._refuse(user.uid, conversation_id, "reject")
        stored = await self._deps.store.get(user.uid, conversation_id)
        if stored is None or stored.kind != "agent":
            raise NotFound("No conversation with this id.")
        if stored.active_run is not None or stored.queued_messages:
            raise RunInProgress(BUSY)
        if message_id is None:  # (the AI SDK's regenerate of the last message)
            message_id = stored.messages[-1].id if stored.messages else ""
        # Judged here to spare the admission; judged again in its commit (``regenerate_run``).
        turn = answered_turn(stored, message_id)
        # A reply made again is a turn as a send is: a parent's controls judge it alike.
        await self._deps.guardians.admit(user.uid, voice=False)
        now = self._deps.clock.now()
        record = new_run(
            self._ids.new("run"),
            self._ids.new("msg"),
            now,
            now + self._watch.lease(),
            turn.id,
            status="queued" if background else "streaming",
            model=None if background else self._deps.label,
        )
        assert record.message is not None
        again = record.message.model_copy(update={"regenerates": message_id})
        record = record.model_copy(update={"message": again})
        draft = Draft(
            user,
            conversation_id,
            new=False,
            message=turn,
            record=record,
            text=turn.text,
            when_busy="reject",
            background=background,
            regenerates=message_id,
        )
        return await self._open_draft(draft)

    def _notice(self, now: datetime) -> Message:
        return Message(
            id=self._ids.new("msg"),
            role="system",
            created_at=now,
            status="complete",
            content=[ContentPart.of_text(NOTICE)],
        )

    def _draft(
        self,
        user: User,
        text: str,
        conversation_id: str | None,
        new: bool,
        background: bool,
        when_busy: WhenBusy,
        document_id: str | None,
        voice_session: str | None,
    ) -> Draft:
        """The message to send, and its run's record."""
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
            now + self._watch.lease(),
            user_message.id,
            status="queued" if background else "streaming",
            model=None if background else self._deps.label,
        )
        return Draft(
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

    async def _read_then_open(
        self, draft: Draft, checked: list[Checked], clip: CheckedClip | None, listening: bool
    ) -> Sent:
        """A message with files or a clip: a per-user limit refuses it before they are
        read (its place freed should reading them fail), then its run opens."""
        user_id, record = draft.user.uid, draft.record
        slot = self._watch.slot(user_id, record.run_id)
        try:
            await slot.take(draft.conversation_id, voice_session=draft.voice_session)
        except RateLimited:
            self._starts.refused(user_id)
            raise
        async with slot:
            if not draft.new:
                await self._refuse(user_id, draft.conversation_id, draft.when_busy, draft.message)
            # The clip first: refused (silent, too long), it leaves no derived file.
            listened = await self._voice.listen(clip) if clip is not None else None
            files = await self._attachments.derive(checked) if checked else []
        draft = with_parts(draft, files)
        if listened is None:
            return await self._open_draft(draft, admitted=True)
        if listening:
            heard = listened
            hearing = Hearing(
                record.run_id,
                draft.message.id,
                lambda listener: self._hear(draft, heard, listener),
            )
            return Sent(draft.conversation_id, draft.message.id, None, hearing=hearing)
        return await self._hear(draft, listened, None)

    async def _hear(self, draft: Draft, listened: Listened, listener: Listener | None) -> Sent:
        """Transcribe a voice message's clip, then open its run (its place freed should
        either fail)."""
        async with self._watch.slot(draft.user.uid, draft.record.run_id):
            heard = await self._voice.transcribe(draft.user.uid, listened.clip, listener)
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
                now + self._watch.lease(),
                message.id,
                status="queued" if draft.background else "streaming",
                model=None if draft.background else self._deps.label,
            )
            draft = dataclasses.replace(draft, message=message, record=record)
        return await self._open_draft(draft, admitted=True)

    async def _open_draft(
        self, draft: Draft, early: Early | None = None, *, admitted: bool = False
    ) -> Sent:
        """Open ``draft``'s run (or queue its message): ``admitted`` already (its place
        is freed should the opening fail, or leave it waiting), or admitted in the same
        commit (``RunSlots.admit_and_open``: refused, nothing is written). ``early``: its
        head start, cancelled unless the run opens here."""
        user, record, user_message = draft.user, draft.record, draft.message
        slot = self._watch.slot(user.uid, record.run_id)
        try:
            if admitted:
                async with slot:
                    conversation = await self._open(draft)
            else:
                conversation = await self._admit_and_open(draft)
        except BaseException:
            await self._starts.drop(early)
            raise
        active = conversation.active_run
        if active is None or active.run_id != record.run_id:
            await self._starts.drop(early)
            if admitted:  # it waits, queued (admitted with its message, it took no slot)
                await slot.release()
            return Sent(conversation.id, user_message.id, None, queued=True)
        if draft.background:  # (no head start: a task asks the model)
            await self._starts.drop(early)
            await self._watch.hand_to_task(user.uid, conversation.id, record)
            return Sent(conversation.id, user_message.id, None)
        # Asked for while the run starts (not before its first token): should the
        # process die first, the next send or stop in the conversation closes the run.
        # Before the head start is awaited, so the committed run has its watchdog even
        # should this request be cancelled in that wait.
        self._background.spawn(self._watch.watchdog(user.uid, conversation.id, record))
        head = await early if early is not None else None
        run = run_of(self._deps, user.uid, conversation, record, head)
        return Sent(conversation.id, user_message.id, run)

    async def _refuse(
        self,
        user_id: str,
        conversation_id: str,
        when_busy: WhenBusy,
        message: Message | None = None,
    ) -> None:
        """Refuse early what ``open_run`` would refuse in its own write, where it judges
        again (this only spares the work). Before the admission writes to the user's
        ledger (no ``message``): a conversation that does not exist or
        (``when_busy="reject"``) has a live run, judged on a fresh cheap read of its
        active run (``probe``: no messages read). Once admitted, before ``message``'s
        attachments are read (decoding a large image is costly, bench/attachments.py):
        a live run (one whose producer died is closed first), or, for a message that
        would wait, a full queue (judged on its text; its files only add to it).

        Raises:
            NotFound: no such conversation for this user (a reserved id included: as a
                ledger key Firestore would refuse it, a 503 rather than a 404).
            RunInProgress: the conversation has a live run.
            RateLimited: the conversation's queue is full.
        """
        if message is None:
            if reserved(conversation_id):
                raise NotFound("No conversation with this id.")
            probe = await self._deps.store.probe(user_id, conversation_id)
            if when_busy == "reject" and probe.live(self._deps.clock.now()):
                raise RunInProgress(BUSY)
            return
        conversation = await self._watch.close_if_dead(user_id, conversation_id)
        if conversation.active_run is None:
            return
        if when_busy == "reject":
            raise RunInProgress(BUSY)
        check_queue(conversation.queued_messages or [], message, self._deps.limits.queue)

    async def _open(self, draft: Draft) -> Conversation:
        """Append ``draft``'s message, once admitted (its own commit)."""
        user_id, conversation_id = draft.user.uid, draft.conversation_id
        change = opening(draft, self._deps.limits.queue)
        if draft.new:
            conversation = change(None)
            await self._deps.store.create(user_id, conversation)
            return conversation
        await self._watch.close_if_dead(user_id, conversation_id)
        return await self._deps.store.mutate(
            user_id,
            conversation_id,
            change,
            reserve=CLOSING_RESERVE,  # new content: closing a run must still find room
        )

    async def _admit_and_open(self, draft: Draft) -> Conversation:
        """Admit ``draft``'s run and append its message in one commit (one commit where
        there were two, the admission's then the message's: one round trip less before
        the first token, bench/stream_overhead.py (a)).

        Raises:
            RateLimited: a user limit (this user then gets no head start for a while),
                or the conversation's queue is full.
            RunInProgress, NotFound: as ``open_run``.
        """
        queue = self._deps.limits.queue
        try:
            return await self._commit(draft, opening(draft, queue, self._deps.clock.now()))
        except Lapsed:
            # Admitted, but a run whose producer died is in the way: it is closed first,
            # in its own write (a change that raises writes nothing: it cannot close and
            # refuse at once), and the send judged again (any run there now is live).
            await self._watch.close_if_dead(draft.user.uid, draft.conversation_id)
        return await self._commit(draft, opening(draft, queue))

    async def _commit(
        self, draft: Draft, change: Callable[[Conversation | None], Conversation]
    ) -> Conversation:
        """``RunSlots.admit_and_open`` with ``change``; a user refused a limit (not a full
        queue) gets no head start for a while."""
        user_id = draft.user.uid
        refused_here: list[BaseException] = []

        def judged(stored: Conversation | None) -> Conversation:
            try:
                return change(stored)
            except BaseException as exc:
                refused_here.append(exc)
                raise

        try:
            return await self._deps.slots.admit_and_open(
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
                self._starts.refused(user_id)
            raise
