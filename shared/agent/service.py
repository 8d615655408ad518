"""Starting and running one agent run: persist first, then stream and persist the reply."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from shared.agent.events import AgentEvent, DoneEvent, ErrorEvent, RunStartEvent, TextEvent
from shared.agent.history import build_history
from shared.agent.runs import INTERRUPTED, finish_run, open_run, put_message
from shared.agent.throttle import ThrottledWriter
from shared.auth.base import User
from shared.clock import Clock
from shared.config import Settings
from shared.errors import INTERNAL_MESSAGE, ContentFiltered, IncompleteResponse, SparkError
from shared.ids import IdGenerator
from shared.llm.base import Finish, ModelProvider, ModelRequest, TextDelta
from shared.schemas.documents import (
    ActiveRun,
    Author,
    ContentPart,
    Conversation,
    Message,
    MessageError,
)
from shared.store.base import ConversationStore

log = logging.getLogger(__name__)

Emit = Callable[[AgentEvent], None]


@dataclass
class AgentService:
    """Everything a run needs, injected once per process."""

    store: ConversationStore
    provider: ModelProvider
    clock: Clock
    ids: IdGenerator
    settings: Settings
    system_prompt: str

    async def start(self, user: User, text: str, conversation_id: str | None) -> Run:
        """Persist the user's message and open a run; the model is not called yet.

        Raises:
            NotFound: ``conversation_id`` is not one of this user's conversations.
            RunInProgress: that conversation already has a live run.
        """
        now = self.clock.now()
        run_id = self.ids.new("run")
        user_message = Message(
            id=self.ids.new("msg"),
            role="user",
            author=Author(user_id=user.uid, display_name=user.name),
            created_at=now,
            status="complete",
            content=[ContentPart.of_text(text)],
        )
        assistant = Message(
            id=self.ids.new("msg"),
            role="assistant",
            created_at=now,
            status="streaming",
            content=[],
            run_id=run_id,
            model=self.provider.label,
        )
        run = ActiveRun(
            run_id=run_id,
            status="streaming",
            assistant_message_id=assistant.id,
            started_at=now,
            lease_expires_at=now + timedelta(seconds=self.settings.run_lease_seconds),
        )
        if conversation_id is None:
            conversation = Conversation(
                id=self.ids.new("conv"),
                participant_ids=[user.uid],
                created_at=now,
                updated_at=now,
                last_message_at=now,
                messages=[user_message, assistant],
                active_run=run,
            )
            await self.store.create(user.uid, conversation)
        else:
            conversation = await self.store.mutate(
                user.uid, conversation_id, lambda c: open_run(c, user_message, assistant, run)
            )
        return Run(self, user.uid, conversation, run, user_message, assistant)


@dataclass
class Run:
    """One run: the model's reply to one user message, streamed and persisted."""

    service: AgentService
    user_id: str
    conversation: Conversation
    record: ActiveRun
    user_message: Message
    assistant: Message
    _text: list[str] = field(default_factory=list)

    @property
    def conversation_id(self) -> str:
        return self.conversation.id

    def _snapshot(self, **update: object) -> Message:
        content = [ContentPart.of_text("".join(self._text))] if self._text else []
        return self.assistant.model_copy(update={"content": content, **update})

    async def _put(self) -> None:
        service = self.service
        lease_until = service.clock.now() + timedelta(seconds=service.settings.run_lease_seconds)
        message = self._snapshot()
        await service.store.mutate(
            self.user_id, self.conversation_id, lambda c: put_message(c, message, lease_until)
        )

    async def _finish(self, message: Message) -> None:
        service = self.service
        now = service.clock.now()
        await service.store.mutate(
            self.user_id,
            self.conversation_id,
            lambda c: finish_run(c, self.record.run_id, message, now),
        )

    async def execute(self, emit: Emit) -> None:
        """Run the model and persist its reply; never raises except on cancellation.

        Events go to ``emit`` as they happen. On failure the message ends with
        status ``error`` (keeping the text streamed so far) and an ``error`` event.
        """
        service = self.service
        emit(
            RunStartEvent(
                run_id=self.record.run_id,
                conversation_id=self.conversation_id,
                user_message_id=self.user_message.id,
                assistant_message_id=self.assistant.id,
            )
        )
        writer = ThrottledWriter(self._put, service.settings.throttle_ms / 1000, service.clock)
        try:
            await self._stream_reply(emit, writer)
        except SparkError as exc:
            await self._fail(writer, emit, exc.code, exc.message)
            return
        except asyncio.CancelledError:
            await asyncio.shield(self._fail(writer, emit, INTERRUPTED.code, INTERRUPTED.message))
            raise
        except Exception:
            log.exception("run %s failed unexpectedly", self.record.run_id)
            await self._fail(writer, emit, "internal", INTERNAL_MESSAGE)
            return
        try:
            await writer.finish(lambda: self._finish(self._snapshot(status="complete")))
        except Exception as exc:
            # The message stays "streaming" until its lease lapses; the next send closes it.
            log.exception("run %s: final write failed", self.record.run_id)
            code = exc.code if isinstance(exc, SparkError) else "internal"
            emit(ErrorEvent(message="Your reply could not be saved; please try again.", code=code))
            return
        emit(DoneEvent(message_id=self.assistant.id, status="complete"))

    async def _heartbeat(self, writer: ThrottledWriter) -> None:
        """Renew the lease while the model is silent, so a slow model is not taken for dead."""
        period = self.service.settings.run_lease_seconds / 3
        while True:
            await self.service.clock.sleep(period)
            writer.touch()

    async def _stream_reply(self, emit: Emit, writer: ThrottledWriter) -> None:
        heartbeat = asyncio.create_task(self._heartbeat(writer))
        try:
            await self._relay(emit, writer)
        finally:
            heartbeat.cancel()

    async def _relay(self, emit: Emit, writer: ThrottledWriter) -> None:
        service = self.service
        history = build_history(
            [m for m in self.conversation.messages if m.id != self.assistant.id],
            service.settings.history_messages,
        )
        request = ModelRequest(system=service.system_prompt, messages=history)
        finish: Finish | None = None
        async for event in service.provider.stream(request):
            if writer.fatal is not None:
                raise writer.fatal
            if isinstance(event, TextDelta):
                if event.text:
                    self._text.append(event.text)
                    emit(TextEvent(event.text))
                    writer.touch()
            elif isinstance(event, Finish):
                finish = event
        if finish is None:
            raise IncompleteResponse("The model's reply was cut off before it finished.")
        if finish.reason == "content_filter":
            raise ContentFiltered(
                "Spark AI Agent stopped this reply because the content filter flagged it."
            )

    async def _fail(self, writer: ThrottledWriter, emit: Emit, code: str, message: str) -> None:
        failed = self._snapshot(status="error", error=MessageError(code=code, message=message))
        try:
            await writer.finish(lambda: self._finish(failed))
        except Exception:
            log.exception("run %s: could not record its failure", self.record.run_id)
        emit(ErrorEvent(message=message, code=code))
