"""``Agent``: the one face of the agent that the edges see.

The ``api`` function and the ``tasks`` function call only these verbs; each hands its
work to the part that does it (``RunService`` opens, claims and stops runs, ``People``
records people's results, ``Uploads`` starts upload sessions, ``Resumes`` resumes
streams, ``lessons.versions`` keeps lessons' versions, ``Families`` keeps families,
``Delivery`` delivers family members' messages, ``Preferences`` keeps users' settings,
``LiveSessions`` and ``SpokenReplies`` are voice),
all built in ``shared/wiring.py``. Work that outlives a call (a run whose client left, a watchdog
being enqueued) is held by one ``Background``, drained on shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from shared.agent.background import Background
from shared.agent.events import DoneEvent, ErrorEvent, TranscriptEvent
from shared.agent.loop import Run
from shared.agent.people import People, Resumed, TaskCancel
from shared.agent.resume import Resumes
from shared.agent.service import Hearing, Next, RunService, Sent, Stopped, WhenBusy
from shared.agent.sse import EventChannel, sse_stream
from shared.agent.transcript import Cursor, Frame
from shared.attachments.service import Requested
from shared.attachments.uploads import Upload, Uploads
from shared.auth.base import User
from shared.clock import Clock
from shared.errors import FamilyNotFound, NoFamily, SparkError, VoiceUnavailable
from shared.families import progress
from shared.families.delivery import Delivered, Delivery, StoredFile
from shared.families.membership import NOT_YOURS
from shared.families.messages import Target
from shared.families.preferences import Preferences
from shared.families.service import Families, ListedInvite, NewInvite
from shared.llm.demo import EXAMPLES
from shared.schemas.documents import FamilyRole, Lesson, UserSettings
from shared.schemas.server import Family
from shared.store import versions
from shared.store.base import LessonStore
from shared.voice.live import OFFLINE, LiveSessions, VoiceSession
from shared.voice.speech import Spoken, SpokenReplies


class Agent:
    """What the edges may ask of the agent; one per process."""

    def __init__(
        self,
        runs: RunService,
        people: People,
        uploads: Uploads,
        resumes: Resumes,
        lessons: LessonStore,
        clock: Clock,
        background: Background,
        keepalive: float,
        families: Families,
        delivery: Delivery,
        preferences: Preferences,
        live: LiveSessions | None = None,
        speech: SpokenReplies | None = None,
    ) -> None:
        self._runs = runs
        self._people = people
        self._uploads = uploads
        self._resumes = resumes
        self._lessons = lessons
        self._clock = clock
        self._background = background
        self._keepalive = keepalive
        self._families = families
        self._delivery = delivery
        self._preferences = preferences
        self._live = live
        self._speech = speech

    # -- the api function ----------------------------------------------------------------

    @property
    def model(self) -> str:
        """The label of the model that answers this process's runs."""
        return self._runs.model

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
    ) -> Sent:
        """Persist the user's message and open its run (``RunService.send``); with
        ``voice_session``, a voice message of that live-audio session; with ``voice``, a
        push-to-talk clip, which a streamed message hears in ``stream_hearing``."""
        return await self._runs.send(
            user,
            text,
            conversation_id,
            background=background,
            when_busy=when_busy,
            document_id=document_id,
            attachments=attachments,
            voice_session=voice_session,
            voice=voice,
            listening=not background,
        )

    async def start_voice_session(self, user_id: str) -> VoiceSession:
        """A live-audio session's secret, within the user's allowance (``LiveSessions``).

        Raises:
            VoiceUnavailable: no audio provider here.
        """
        if self._live is None:
            raise VoiceUnavailable(OFFLINE)
        return await self._live.start(user_id)

    async def speak(self, user_id: str, conversation_id: str, message_id: str) -> Spoken:
        """A reply read aloud, from the cache or the provider (``SpokenReplies``).

        Raises:
            VoiceUnavailable: no audio provider here.
        """
        if self._speech is None:
            raise VoiceUnavailable(OFFLINE)
        return await self._speech.speak(user_id, conversation_id, message_id)

    def stream(self, run: Run) -> AsyncIterator[bytes]:
        """The SSE body of ``run``, produced here. The run goes on should its client
        leave (its reply is still saved); ``drain`` waits for it."""
        channel = EventChannel()
        task = self._background.spawn(run.execute(channel.emit), name=f"run-{run.run_id}")
        task.add_done_callback(lambda _: channel.end())
        return sse_stream(channel, self._keepalive)

    def stream_hearing(self, hearing: Hearing) -> AsyncIterator[bytes]:
        """The SSE body of a voice message: its transcript as it is heard (``transcript``
        events, each with the id of the run's very start), then its run as ``stream``
        gives it. A clip refused now (no words heard, a provider's failure, a run live
        meanwhile) ends the stream with ``error``, and nothing of it is written."""
        channel = EventChannel(hearing.run_id)
        start = Cursor.event_id(hearing.run_id, 0, 0)

        def listener(text: str, *, final: bool) -> None:
            channel.emit(Frame(start, TranscriptEvent(text, final=final)))

        async def produce() -> None:
            try:
                sent = await hearing.finish(listener)
            except SparkError as exc:
                error = ErrorEvent(message=exc.message, code=exc.code)
                channel.emit(Frame(Cursor.end_id(hearing.run_id), error))
                return
            if sent.run is None:  # it waits behind a live run (``whenBusy: queue``)
                done = DoneEvent(message_id=sent.user_message_id, status="queued")
                channel.emit(Frame(Cursor.end_id(hearing.run_id), done))
                return
            await sent.run.execute(channel.emit)

        task = self._background.spawn(produce(), name=f"hear-{hearing.run_id}")
        task.add_done_callback(lambda _: channel.end())
        return sse_stream(channel, self._keepalive)

    async def resume(
        self, user_id: str, conversation_id: str, last_event_id: str | None
    ) -> AsyncIterator[bytes] | None:
        """What the client missed of the active (or last) run, then the rest of it;
        ``None`` when there is nothing to send (``Resumes.start``)."""
        return await self._resumes.start(user_id, conversation_id, last_event_id)

    async def stop(self, user_id: str, conversation_id: str) -> Stopped:
        """Stop the conversation's active run wherever it runs (``RunService.stop``)."""
        return await self._runs.stop(user_id, conversation_id)

    async def answer(
        self,
        user_id: str,
        conversation_id: str,
        call_id: str,
        answers: dict[str, str | list[str]],
        *,
        background: bool,
    ) -> Resumed:
        """Answer an ``ask_user_question`` call and resume the agent (``People.answer``)."""
        return await self._people.answer(
            user_id, conversation_id, call_id, answers, background=background
        )

    async def decide(
        self,
        user_id: str,
        conversation_id: str,
        call_id: str,
        *,
        approved: bool,
        reason: str | None = None,
        background: bool,
    ) -> Resumed:
        """The owner approves or denies a call (``People.decide``)."""
        return await self._people.decide(
            user_id,
            conversation_id,
            call_id,
            approved=approved,
            reason=reason,
            background=background,
        )

    async def submit_result(
        self,
        user_id: str,
        conversation_id: str,
        call_id: str,
        output: object,
        *,
        ok: bool,
        background: bool,
    ) -> Resumed:
        """A client-executed tool's output, and the agent resumed (``People.submit_result``)."""
        return await self._people.submit_result(
            user_id, conversation_id, call_id, output, ok=ok, background=background
        )

    async def cancel_task(self, user_id: str, task_id: str) -> TaskCancel:
        """Cancel one of the user's tasks: at once, or at its tool's next step
        (``People.cancel_task``)."""
        return await self._people.cancel_task(user_id, task_id)

    async def start_upload(
        self,
        user_id: str,
        file_name: str,
        content_type: str,
        size_bytes: int,
        origin: str | None = None,
    ) -> Upload:
        """An upload session for one file under the user's uploads (``Uploads.start``)."""
        return await self._uploads.start(user_id, file_name, content_type, size_bytes, origin)

    async def lesson_versions(self, user_id: str, lesson_id: str) -> versions.History:
        """The lesson and its kept versions (``versions.history``)."""
        return await versions.history(self._lessons, user_id, lesson_id)

    async def restore_lesson(self, user_id: str, lesson_id: str, version: int) -> Lesson:
        """A kept version becomes the lesson's next one (``versions.restore``)."""
        now = self._clock.now()
        return await versions.restore(self._lessons, user_id, lesson_id, version, now)

    @property
    def families(self) -> Families:
        """The family verbs (``Families``): create, invite, join, change roles, leave."""
        return self._families

    async def family_progress(self, user_id: str, family_id: str) -> list[progress.MemberProgress]:
        """Each member's lessons, with their blanks and how many are answered, for a
        member of the family, read from the counts the lesson store keeps
        (``progress.of_members``: nothing is parsed).

        Raises:
            FamilyNotFound: it is not the caller's family.
        """
        try:
            family = await self._families.current(user_id)
        except NoFamily:
            family = None
        if family is None or family.id != family_id:
            raise FamilyNotFound(NOT_YOURS)
        return await progress.of_members(self._lessons, family.members)

    @property
    def delivery(self) -> Delivery:
        """Verbatim messages between family members (``Delivery.deliver``), and the
        files their messages carry (``Delivery.file``)."""
        return self._delivery

    @property
    def preferences(self) -> Preferences:
        """Users' settings (``Preferences``): the opt-out of AI reading family messages."""
        return self._preferences

    # -- the tasks function --------------------------------------------------------------

    async def claim(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """A queued run, admitted and claimed for this delivery (``RunService.claim``)."""
        return await self._runs.claim(user_id, conversation_id, run_id)

    async def supervise(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """The watchdog's look at ``run_id`` (``RunService.supervise``)."""
        return await self._runs.supervise(user_id, conversation_id, run_id)

    async def follow_up(
        self, user_id: str, conversation_id: str, source_id: str, attempt: int | None
    ) -> Next:
        """How the agent goes on after the results in ``source_id``: a run to produce here,
        or (``attempt``) a task that tries again once the conversation is free
        (``Continuation.follow_up``)."""
        return await self._runs.follow_up(user_id, conversation_id, source_id, attempt)

    async def expire(
        self, user_id: str, conversation_id: str, call_id: str, seconds: float
    ) -> Run | None:
        """A client call's time is up (``People.expire``)."""
        return await self._people.expire(user_id, conversation_id, call_id, seconds)

    # -- the process ---------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait for the work still going in the background (runs whose clients left)."""
        await self._background.drain()

    # -- the api function: families, their messages, settings (edges call no part) -----

    def examples(self, *, demo: bool) -> list[str]:
        """The requests the demo model recognises, for a client to offer (none otherwise)."""
        return list(EXAMPLES) if demo else []

    async def deliver(
        self,
        user_id: str,
        text: str,
        target: Target,
        *,
        attachments: Sequence[Requested] = (),
        idempotency_key: str | None = None,
    ) -> Delivered:
        """The user's own message to family members, verbatim (``Delivery.deliver``)."""
        return await self._delivery.deliver(
            user_id,
            text,
            target,
            attachments=attachments,
            via="user",
            idempotency_key=idempotency_key,
        )

    async def conversation_file(self, user_id: str, conversation_id: str, path: str) -> StoredFile:
        """A file a message in the user's copy carries (``Delivery.file``)."""
        return await self._delivery.file(user_id, conversation_id, path)

    async def create_family(self, user: User, name: str, display_name: str | None) -> Family:
        """A new family, with ``user`` its parent (``Families.create``)."""
        return await self._families.create(user, name, display_name)

    async def current_family(self, user_id: str) -> Family:
        """The user's family (``Families.current``)."""
        return await self._families.current(user_id)

    async def join_family(self, user: User, token: str, display_name: str | None) -> Family:
        """Join with an invite link's token (``Families.join``)."""
        return await self._families.join(user, token, display_name)

    async def invite(
        self,
        user_id: str,
        family_id: str,
        role: FamilyRole,
        *,
        max_uses: int,
        expires_in_hours: int,
    ) -> NewInvite:
        """A new invite link (``Families.invite``)."""
        return await self._families.invite(
            user_id, family_id, role, max_uses=max_uses, expires_in_hours=expires_in_hours
        )

    async def invites(self, user_id: str, family_id: str) -> list[ListedInvite]:
        """The family's invites, newest first (``Families.invites``)."""
        return await self._families.invites(user_id, family_id)

    async def revoke_invite(self, user_id: str, family_id: str, invite_id: str) -> None:
        """An invite link stops working (``Families.revoke``)."""
        await self._families.revoke(user_id, family_id, invite_id)

    async def set_role(
        self, user_id: str, family_id: str, member_id: str, role: FamilyRole
    ) -> Family:
        """A member's new role (``Families.set_role``)."""
        return await self._families.set_role(user_id, family_id, member_id, role)

    async def remove_member(self, user_id: str, family_id: str, member_id: str) -> None:
        """A member leaves, or a parent removes them (``Families.remove``)."""
        await self._families.remove(user_id, family_id, member_id)

    async def update_settings(
        self, user_id: str, *, ai_reads_family_messages: bool
    ) -> UserSettings:
        """The user's settings changed (``Preferences.update``)."""
        return await self._preferences.update(
            user_id, ai_reads_family_messages=ai_reads_family_messages
        )
