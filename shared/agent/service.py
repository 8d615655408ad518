"""Opening runs: persist the user's message first, then let a ``Run`` produce the reply."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.agent.history import steps_since_user
from shared.agent.loop import Run
from shared.agent.runs import AlreadyAnswered, claim_queued_run, open_follow_up, open_run
from shared.auth.base import User
from shared.clock import Clock
from shared.config import Settings
from shared.ids import IdGenerator
from shared.llm.base import ModelProvider
from shared.schemas.documents import (
    ActiveRun,
    Author,
    ContentPart,
    Conversation,
    Message,
    RunStatus,
)
from shared.store.base import ConversationStore
from shared.tasks.naming import follow_up_id
from shared.tasks.scheduler import TaskScheduler
from shared.tools.base import ToolRegistry


@dataclass
class AgentService:
    """Everything a run needs, injected once per process."""

    store: ConversationStore
    provider: ModelProvider
    clock: Clock
    ids: IdGenerator
    settings: Settings
    system_prompt: str
    tools: ToolRegistry
    scheduler: TaskScheduler

    async def start(
        self, user: User, text: str, conversation_id: str | None, queued: bool = False
    ) -> Run:
        """Persist the user's message and open a run; the model is not called yet.

        With ``queued`` the run waits for a task to produce the reply (``202`` mode).

        Raises:
            NotFound: ``conversation_id`` is not one of this user's conversations.
            RunInProgress: that conversation already has a live run.
        """
        now = self.clock.now()
        user_message = Message(
            id=self.ids.new("msg"),
            role="user",
            author=Author(user_id=user.uid, display_name=user.name),
            created_at=now,
            status="complete",
            content=[ContentPart.of_text(text)],
        )
        assistant, run = self._placeholder(
            self.ids.new("msg"), now, "queued" if queued else "streaming"
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
        return self._run(user.uid, conversation, run, user_message, assistant)

    def _placeholder(
        self, message_id: str, now: datetime, status: RunStatus
    ) -> tuple[Message, ActiveRun]:
        """The empty assistant message a run fills, and the run record that holds it."""
        run_id = self.ids.new("run")
        assistant = Message(
            id=message_id,
            role="assistant",
            created_at=now,
            status="streaming",
            content=[],
            run_id=run_id,
            model=self.provider.label,
        )
        run = ActiveRun(
            run_id=run_id,
            status=status,
            assistant_message_id=assistant.id,
            started_at=now,
            lease_expires_at=now + timedelta(seconds=self.settings.run_lease_seconds),
        )
        return assistant, run

    def _run(
        self,
        user_id: str,
        conversation: Conversation,
        record: ActiveRun,
        user_message: Message | None,
        assistant: Message,
    ) -> Run:
        earlier = [m for m in conversation.messages if m.id != assistant.id]
        return Run(
            self,
            user_id,
            conversation,
            record,
            user_message,
            assistant,
            steps_before=steps_since_user(earlier),
        )

    async def resume_queued(self, user_id: str, conversation_id: str, run_id: str) -> Run | None:
        """The run a ``202`` send opened, claimed for this delivery (``None``: another
        delivery has it, or it is over)."""
        lease_until = self.clock.now() + timedelta(seconds=self.settings.run_lease_seconds)
        try:
            conversation = await self.store.mutate(
                user_id, conversation_id, lambda c: claim_queued_run(c, run_id, lease_until)
            )
        except AlreadyAnswered:
            return None
        record = conversation.active_run
        assert record is not None
        assistant = conversation.message(record.assistant_message_id)
        if assistant is None:
            return None
        users = [m for m in conversation.messages if m.role == "user"]
        return self._run(user_id, conversation, record, users[-1] if users else None, assistant)

    async def follow_up(self, user_id: str, conversation_id: str, source: Message) -> Run | None:
        """Open the agent's follow-up to the task results of ``source`` (``None``: it
        exists already).

        Raises:
            RunInProgress: another run is live in the conversation; try later.
        """
        assistant, run = self._placeholder(follow_up_id(source.id), self.clock.now(), "streaming")
        try:
            conversation = await self.store.mutate(
                user_id, conversation_id, lambda c: open_follow_up(c, assistant, run)
            )
        except AlreadyAnswered:
            return None
        return self._run(user_id, conversation, run, None, assistant)
