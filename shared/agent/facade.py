"""``Agent``: the one face of the agent that the edges see.

The ``api`` function and the ``tasks`` function call only these verbs; each hands its
work to the part that does it (``Opening`` opens users' messages, ``RunService`` puts
the runs' parts together and claims, continues and stops runs, ``People``
records people's results, ``Uploads`` starts upload sessions, ``Resumes`` resumes
streams, ``lessons.versions`` keeps lessons' versions, ``Families`` keeps families,
``Delivery`` delivers family members' messages, ``Preferences`` keeps users' settings,
``Exports`` streams a person's data as a zip,
``LiveSessions`` and ``SpokenReplies`` are voice, ``Conversations`` renames, rates
and deletes conversations, ``Retention`` deletes those untouched too long, ``Erasures``
and ``Eraser`` erase accounts),
all built in ``shared/wiring.py``. Work that outlives a call (a run whose client left, a watchdog
being enqueued) is held by one ``Background``, drained on shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace

from shared.agent.chat import Chats
from shared.agent.conversations.manage import Conversations, Rated
from shared.agent.conversations.retention import Retention, Swept
from shared.agent.family_verbs import FamilyVerbs
from shared.agent.run.background import Background
from shared.agent.run.loop import Run
from shared.agent.service import Hearing, Next, RunService, Sent, Stopped, WhenBusy
from shared.agent.stream.events import DoneEvent, ErrorEvent, TranscriptEvent
from shared.agent.stream.resume import Resumes
from shared.agent.stream.sse import SSE, EventChannel, Framing, sse_stream
from shared.agent.stream.transcript import Cursor, Frame
from shared.agent.waiting.people import People, Resumed, TaskCancel
from shared.agent.waiting.task_calls import (
    TOOL_FAILED,
    AfterResult,
    BeforeTool,
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
from shared.errors import ConfigurationError, SparkError, VoiceUnavailable
from shared.export.service import Exports
from shared.families.controls import ParentalControls
from shared.families.delivery import Delivery
from shared.families.preferences import Preferences
from shared.families.safety import SafetyFlags
from shared.families.service import Families
from shared.schemas.deletions import Deletion
from shared.schemas.documents import Conversation, Lesson, Message, Rating
from shared.schemas.tasks import EraseTask, RetentionTask
from shared.schemas.uichat import ChatRequest
from shared.store import versions
from shared.store.base import LessonStore
from shared.voice.live import OFFLINE, LiveSessions, VoiceSession
from shared.voice.speech import Spoken, SpokenReplies

# ``Next``: what ``follow_up`` says of the agent's follow-up (the tasks handler reads it).
__all__ = ["Agent", "Next"]


class Agent(FamilyVerbs):
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
        background: bool = False,
        when_busy: WhenBusy = "reject",
        document_id: str | None = None,
        attachments: Sequence[Requested] = (),
        voice_session: str | None = None,
        voice: str | None = None,
        create: bool = False,
        stream: bool = False,
    ) -> Sent:
        """Persist the user's message and open its run (``Opening.send``); with
        ``voice_session``, a voice message of that live-audio session; with ``voice``, a
        push-to-talk clip, which a streamed message hears in ``stream_hearing``; with
        ``create``, ``conversation_id`` is made should it not exist (a chat's own id).
        With ``stream``, the messages route's one call: ``Sent.body`` is the SSE body
        that produces the reply here (``stream``, or ``stream_hearing``), unless a task
        produces it or the message waits its turn."""
        sent = await self._opening.send(
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
            create=create,
        )
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

    async def rename(self, user_id: str, conversation_id: str, title: str) -> Conversation:
        """Title one of the user's conversations (``Conversations.rename``)."""
        return await self._conversations.rename(user_id, conversation_id, title)

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None:
        """Delete the user's copy of a conversation and all kept of it
        (``Conversations.delete``)."""
        await self._conversations.delete(user_id, conversation_id)

    async def rate(
        self,
        user_id: str,
        conversation_id: str,
        message_id: str,
        rating: Rating,
        comment: str | None = None,
    ) -> Rated:
        """Keep the user's feedback on a reply (``Conversations.rate``)."""
        return await self._conversations.rate(user_id, conversation_id, message_id, rating, comment)

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

    async def resume(
        self,
        user_id: str,
        conversation_id: str,
        last_event_id: str | None,
        framing: Framing = SSE,
        *,
        live_only: bool = False,
    ) -> AsyncIterator[bytes] | None:
        """What the client missed of the active (or last; ``live_only``: only an active)
        run, then the rest of it; ``None`` when there is nothing to send
        (``Resumes.start``)."""
        return await self._resumes.start(
            user_id, conversation_id, last_event_id, framing, live_only=live_only
        )

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
        await self._alive(user_id)
        return await self._uploads.start(user_id, file_name, content_type, size_bytes, origin)

    async def lesson_versions(self, user_id: str, lesson_id: str) -> versions.History:
        """The lesson and its kept versions (``versions.history``)."""
        return await versions.history(self._lessons, user_id, lesson_id)

    async def restore_lesson(self, user_id: str, lesson_id: str, version: int) -> Lesson:
        """A kept version becomes the lesson's next one (``versions.restore``)."""
        now = self._clock.now()
        return await versions.restore(self._lessons, user_id, lesson_id, version, now)

    async def export(self, user_id: str) -> AsyncIterator[bytes]:
        """The user's data as a zip, streamed as it is made (``Exports.start``)."""
        return await self._exports.start(user_id)

    async def export_dependent(
        self, parent_id: str, family_id: str, member_id: str
    ) -> AsyncIterator[bytes]:
        """A dependent's data, for a parent of their family
        (``Exports.start_for_dependent``)."""
        return await self._exports.start_for_dependent(parent_id, family_id, member_id)

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

    async def claim(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """A queued run, admitted and claimed for this delivery (``RunService.claim``)."""
        return await self._runs.claim(user_id, conversation_id, run_id)

    async def supervise(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """The watchdog's look at ``run_id`` (``RunService.supervise``)."""
        return await self._runs.supervise(user_id, conversation_id, run_id)

    async def follow_up(
        self,
        user_id: str,
        conversation_id: str,
        source_id: str,
        attempt: int | None,
        record: Callable[[Conversation], Conversation] | None = None,
        reserve: int = 0,
    ) -> Next:
        """How the agent goes on after the results in ``source_id``, recorded already or
        by ``record`` in the same write (``Continuation.follow_up``): its follow-up
        produced here, now (``run``: it has ended when this returns), or (``attempt``) a
        task that tries again once the conversation is free."""
        going = await self._continuation.follow_up(
            user_id, conversation_id, source_id, attempt, record, reserve
        )
        if going.run is not None:
            await going.run.execute()
        return going

    async def begin_tool(
        self, user_id: str, conversation_id: str, call_id: str, *, cancel_requested: bool
    ) -> tuple[Conversation | None, BeforeTool]:
        """What a task's delivery finds of its call, judged and written in one commit
        (``TaskCalls.begin``): run the tool, wait, or leave it."""
        return await self._task_calls.begin(user_id, conversation_id, call_id, cancel_requested)

    async def ask_for_task(
        self, user_id: str, conversation_id: str, call_id: str, args_json: str
    ) -> None:
        """Put a task's question to its user (``TaskCalls.ask``)."""
        await self._task_calls.ask(user_id, conversation_id, call_id, args_json)

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
        return await self.follow_up(user_id, conversation_id, source_id, None, record, reserve)

    @staticmethod
    def after_tool(
        conversation: Conversation, call_id: str, message: Message, task_id: str
    ) -> AfterResult:
        """How the agent goes on and the task ends, once ``call_id`` has its result
        (``after_result``)."""
        return after_result(conversation, call_id, message, task_id)

    async def expire(
        self, user_id: str, conversation_id: str, call_id: str, seconds: float
    ) -> Run | None:
        """A client call's time is up (``People.expire``)."""
        return await self._people.expire(user_id, conversation_id, call_id, seconds)

    # -- the process ---------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait for the work still going in the background (runs whose clients left)."""
        await self._background.drain()
