"""``Agent``: the one face of the agent that the edges see.

The ``api`` function and the ``tasks`` function call only these verbs; each hands its
work to the part that does it (``Opening`` opens users' messages, ``RunService`` puts
the runs' parts together and claims, continues and stops runs, ``People`` records
people's results, ``TaskCalls`` a task's call in its conversation, ``Uploads`` starts
upload sessions, ``Resumes`` resumes streams, ``lessons.versions`` keeps lessons'
versions, ``Families`` keeps families, ``Delivery`` delivers family members' messages,
``Preferences`` keeps users' settings, ``Exports`` streams a person's data as a zip,
``LiveSessions`` and ``SpokenReplies`` are voice, ``Conversations`` renames, rates and
deletes conversations, ``Retention`` deletes those untouched too long, ``Erasures`` and
``Eraser`` erase accounts), all built in ``shared/wiring.py``. A verb that only hands
its call on is the part's own method (``handed``): its signature is written once. Work
that outlives a call (a run whose client left, a watchdog being enqueued) is held by one
``Background``, drained on shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar, Unpack

from shared.agent.chat import Chats
from shared.agent.conversations.manage import Conversations
from shared.agent.conversations.retention import Retention, Swept
from shared.agent.run.background import Background
from shared.agent.run.loop import Run
from shared.agent.sending.opening import ERASED, Sending
from shared.agent.service import Hearing, Next, RunService, Sent
from shared.agent.stream.events import DoneEvent, ErrorEvent, TranscriptEvent
from shared.agent.stream.resume import Resumes
from shared.agent.stream.sse import SSE, EventChannel, Framing, sse_stream
from shared.agent.stream.transcript import Cursor, Frame
from shared.agent.waiting.people import People
from shared.agent.waiting.task_calls import (
    TOOL_FAILED,
    AfterResult,
    Recorded,
    TaskCalls,
    after_result,
)
from shared.attachments.service import Requested
from shared.attachments.uploads import Upload, Uploads
from shared.auth.base import User
from shared.clock import Clock
from shared.erasure.service import Erasures
from shared.erasure.steps import Eraser
from shared.errors import (
    AccountDeleted,
    ConfigurationError,
    FamilyNotFound,
    NoFamily,
    SparkError,
    VoiceUnavailable,
)
from shared.export.service import Exports
from shared.families import progress
from shared.families.controls import ParentalControls
from shared.families.delivery import Delivered, Delivery
from shared.families.membership import NOT_YOURS
from shared.families.messages import Target
from shared.families.preferences import Preferences
from shared.families.safety import SafetyFlags
from shared.families.service import Families
from shared.llm.demo import EXAMPLES
from shared.schemas.deletions import Deletion
from shared.schemas.documents import (
    Controls,
    Conversation,
    Lesson,
    Message,
    SafetyMirror,
    UserSettings,
)
from shared.schemas.server import Family
from shared.schemas.tasks import EraseTask, RetentionTask
from shared.schemas.uichat import ChatRequest
from shared.store import versions
from shared.store.base import LessonStore
from shared.voice.live import OFFLINE, LiveSessions, VoiceSession
from shared.voice.speech import Spoken, SpokenReplies

P = ParamSpec("P")
R = TypeVar("R")
Part = TypeVar("Part")


def handed(
    part: str, verb: Callable[Concatenate[Part, P], Awaitable[R]]
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """A verb of ``Agent`` that only hands its call to one of its parts (the attribute
    named ``part``): that part's own method, its signature and docstring, so the facade
    does not copy them. It awaits the part's call itself, so the caller's ``await``
    runs the part's work from the facade, as any other verb's."""

    async def handing(agent: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await verb(getattr(agent, part), *args, **kwargs)

    handing.__name__ = handing.__qualname__ = verb.__name__
    handing.__doc__ = verb.__doc__
    return handing


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
        chats: Chats,
        exports: Exports,
        conversations: Conversations,
        task_calls: TaskCalls,
        live: LiveSessions | None = None,
        speech: SpokenReplies | None = None,
        erasures: Erasures | None = None,
        eraser: Eraser | None = None,
        retention: Retention | None = None,
        safety: SafetyFlags | None = None,
        controls: ParentalControls | None = None,
    ) -> None:
        self._runs = runs
        self._opening = runs.opening
        self._continuation = runs.continuation
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
        self._chats = chats
        self._exports = exports
        self._live = live
        self._speech = speech
        self._erasures = erasures
        self._safety = safety
        self._controls = controls
        self._eraser = eraser
        self._conversations = conversations
        self._task_calls = task_calls
        self._retention = retention

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
        stream: bool = False,
        **sending: Unpack[Sending],
    ) -> Sent:
        """Persist the user's message and open its run, as ``sending`` says
        (``Opening.send``, ``Sending``). With ``stream``, the messages route's one call:
        ``Sent.body`` is the SSE body that produces the reply here (``stream``, or
        ``stream_hearing`` for a clip, heard as it streams), unless a task produces it
        or the message waits its turn."""
        listening = not sending.get("background", False)
        sent = await self._opening.send(user, text, conversation_id, listening=listening, **sending)
        if not stream:
            return sent
        if sent.hearing is not None:
            return replace(sent, body=self.stream_hearing(sent.hearing))
        return sent if sent.run is None else replace(sent, body=self.stream(sent.run))

    async def regenerate(
        self, user: User, conversation_id: str, message_id: str, *, background: bool = False
    ) -> Sent:
        """Make the conversation's last reply again (``Opening.regenerate``), as ``send``
        with ``stream`` does: ``Sent.body`` is the SSE body producing it here, unless a
        task produces it (``background``)."""
        sent = await self._opening.regenerate(
            user, conversation_id, message_id, background=background
        )
        return sent if sent.run is None else replace(sent, body=self.stream(sent.run))

    stop = handed("_runs", RunService.stop)

    rename = handed("_conversations", Conversations.rename)

    delete_conversation = handed("_conversations", Conversations.delete)

    rate = handed("_conversations", Conversations.rate)

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

    def stream(self, run: Run, framing: Framing = SSE) -> AsyncIterator[bytes]:
        """The SSE body of ``run``, produced here (``framing``: our events, or the AI
        SDK's UI message stream). The run goes on should its client leave (its reply is
        still saved); ``drain`` waits for it."""
        channel = EventChannel()
        task = self._background.spawn(run.execute(channel.emit), name=f"run-{run.run_id}")
        task.add_done_callback(lambda _: channel.end())
        return sse_stream(channel, self._keepalive, framing)

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

    async def chat(self, user: User, request: ChatRequest) -> AsyncIterator[bytes]:
        """An AI SDK chat's turn (a message, or people's answers), its reply as the UI
        message stream (``Chats.turn``)."""
        return await self._chats.turn(user, request, self.stream)

    async def chat_resume(self, user_id: str, chat_id: str) -> AsyncIterator[bytes] | None:
        """An AI SDK chat's resume: the reply being written, as the UI message stream
        (``None``: none is; ``Chats.resume``)."""

        async def live(
            user_id: str, conversation_id: str, framing: Framing
        ) -> AsyncIterator[bytes] | None:
            return await self.resume(user_id, conversation_id, None, framing, live_only=True)

        return await self._chats.resume(user_id, chat_id, live)

    resume = handed("_resumes", Resumes.start)

    answer = handed("_people", People.answer)

    decide = handed("_people", People.decide)

    submit_result = handed("_people", People.submit_result)

    cancel_task = handed("_people", People.cancel_task)

    async def start_upload(
        self,
        user_id: str,
        file_name: str,
        content_type: str,
        size_bytes: int,
        origin: str | None = None,
    ) -> Upload:
        """An upload session for one file under the user's uploads (``Uploads.start``)."""
        await self._alive(user_id)
        return await self._uploads.start(user_id, file_name, content_type, size_bytes, origin)

    async def lesson_versions(self, user_id: str, lesson_id: str) -> versions.History:
        """The lesson and its kept versions (``versions.history``)."""
        return await versions.history(self._lessons, user_id, lesson_id)

    async def restore_lesson(self, user_id: str, lesson_id: str, version: int) -> Lesson:
        """A kept version becomes the lesson's next one (``versions.restore``)."""
        now = self._clock.now()
        return await versions.restore(self._lessons, user_id, lesson_id, version, now)

    export = handed("_exports", Exports.start)

    export_dependent = handed("_exports", Exports.start_for_dependent)

    async def erase_account(self, user_id: str) -> Deletion:
        """Begin erasing the caller's account (``Erasures.erase``): its record."""
        return (await self._erasing().erase(user_id)).deletion

    async def erase_dependent(self, user_id: str, family_id: str, member_id: str) -> Deletion:
        """A parent begins erasing a dependent's account (``Erasures.erase_dependent``)."""
        return (await self._erasing().erase_dependent(user_id, family_id, member_id)).deletion

    def _erasing(self) -> Erasures:
        if self._erasures is None:
            raise ConfigurationError("This process erases no accounts.")
        return self._erasures

    # -- families, their messages and users' settings -----------------------------------

    async def _alive(self, user_id: str) -> None:
        """Refuse a write under an account whose erasure has begun (a fresh read): the
        caller's ID token may outlive their account by up to an hour.

        Raises:
            AccountDeleted: it has begun.
        """
        if self._erasures is not None and await self._erasures.erased([user_id]):
            raise AccountDeleted(ERASED)

    @property
    def families(self) -> Families:
        """The family verbs (``Families``): create, invite, join, change roles, leave."""
        return self._families

    async def family_safety(self, user_id: str, family_id: str) -> SafetyMirror:
        """The flags raised for ``family_id``'s dependents, for its parent ``user_id``.

        Raises:
            FamilyNotFound: it is not the caller's family, or they are not a parent.
        """
        if self._safety is None:
            raise FamilyNotFound(NOT_YOURS)
        return await self._safety.read(user_id, family_id)

    async def set_controls(
        self, user_id: str, family_id: str, member_id: str, controls: Controls
    ) -> Controls:
        """A dependent's controls, set by their parent ``user_id`` (DESIGN §16), as
        written to the family and to the dependent's mirror.

        Raises:
            FamilyNotFound: not the caller's family, the caller is not a parent in it,
                or ``member_id`` is not a dependent of it.
        """
        if self._controls is None:
            raise FamilyNotFound(NOT_YOURS)
        await self._alive(user_id)
        return await self._controls.put(user_id, family_id, member_id, controls)

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
        await self._alive(user_id)
        return await self._delivery.deliver(
            user_id,
            text,
            target,
            attachments=attachments,
            via="user",
            idempotency_key=idempotency_key,
        )

    conversation_file = handed("_delivery", Delivery.file)

    async def create_family(self, user: User, name: str, display_name: str | None) -> Family:
        """A new family, with ``user`` its parent (``Families.create``)."""
        await self._alive(user.uid)
        return await self._families.create(user, name, display_name)

    current_family = handed("_families", Families.current)

    async def join_family(self, user: User, token: str, display_name: str | None) -> Family:
        """Join with an invite link's token (``Families.join``)."""
        await self._alive(user.uid)
        return await self._families.join(user, token, display_name)

    invite = handed("_families", Families.invite)

    invites = handed("_families", Families.invites)

    revoke_invite = handed("_families", Families.revoke)

    set_role = handed("_families", Families.set_role)

    async def update_settings(
        self, user_id: str, *, ai_reads_family_messages: bool
    ) -> UserSettings:
        """The user's settings changed (``Preferences.update``)."""
        await self._alive(user_id)
        return await self._preferences.update(
            user_id, ai_reads_family_messages=ai_reads_family_messages
        )

    rename_member = handed("_families", Families.rename)

    remove_member = handed("_families", Families.remove)

    # -- the tasks function --------------------------------------------------------------

    async def erase_step(self, task: EraseTask) -> Deletion | None:
        """Take an erasure one step on (``Eraser.step``)."""
        if self._eraser is None:
            raise ConfigurationError("This process erases no accounts.")
        return await self._eraser.step(task)

    async def sweep(self, task: RetentionTask) -> Swept:
        """One page of the retention sweep (``Retention.sweep``)."""
        if self._retention is None:
            raise ConfigurationError("This process sweeps no conversations.")
        return await self._retention.sweep(task)

    claim = handed("_runs", RunService.claim)

    supervise = handed("_runs", RunService.supervise)

    async def follow_up(
        self, user_id: str, conversation_id: str, source_id: str, attempt: int | None
    ) -> Next:
        """How the agent goes on after the results recorded in ``source_id``
        (``Continuation.follow_up``): its follow-up produced here, now (``run``: it has
        ended when this returns), or (``attempt``) a task that tries again once the
        conversation is free."""
        going = self._continuation.follow_up(user_id, conversation_id, source_id, attempt)
        return await _produced(going)

    begin_tool = handed("_task_calls", TaskCalls.begin)

    ask_for_task = handed("_task_calls", TaskCalls.ask)

    async def record_result(
        self,
        user_id: str,
        conversation_id: str,
        source_id: str,
        call_id: str,
        outcome: Recorded,
        *,
        task_error: str = TOOL_FAILED,
        reserve: int = 0,
    ) -> Next:
        """Give a task's call its result and, in the same write, let the agent follow
        up (``follow_up``); ``task_error``: what a failed task's section says."""
        record = self._task_calls.result(call_id, outcome, task_error)
        going = self._continuation.follow_up(
            user_id, conversation_id, source_id, None, record, reserve
        )
        return await _produced(going)

    @staticmethod
    def after_tool(
        conversation: Conversation, call_id: str, message: Message, task_id: str
    ) -> AfterResult:
        """How the agent goes on and the task ends, once ``call_id`` has its result
        (``after_result``)."""
        return after_result(conversation, call_id, message, task_id)

    expire = handed("_people", People.expire)

    # -- the process ---------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait for the work still going in the background (runs whose clients left)."""
        await self._background.drain()


async def _produced(going: Awaitable[Next]) -> Next:
    """``going``'s follow-up, produced here and ended by the time this returns."""
    next_ = await going
    if next_.run is not None:
        await next_.run.execute()
    return next_
