"""A message being sent (``Draft``), from its admission to its run's opening, and the
pure change that opens it (``opening``): what the opening (``opening.py``) writes and the
head start (``head_start.py``) guesses from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from shared.agent.prompt.history import steps_since_user
from shared.agent.run.deps import RunDeps
from shared.agent.run.loop import FirstRequest, Run
from shared.agent.run.runs import QueueLimits, open_run, regenerate_run
from shared.auth.base import User
from shared.errors import NotFound, StoreError
from shared.schemas.documents import ActiveRun, ContentPart, Conversation, Message

WhenBusy = Literal["reject", "queue"]


@dataclass(frozen=True, slots=True)
class Draft:
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
    # A regenerate: the reply made again (``message`` is the user turn it answered,
    # stored already, not appended again).
    regenerates: str | None = None
    # What opens a new conversation of a dependent, before their first message
    # (``notice.opening_notice``): never sent to the model.
    notice: Message | None = None


class Lapsed(Exception):
    """The conversation's active run's lease lapsed: it is closed (or, queued, renewed
    and handed on) in a write of its own before the message is appended."""


def run_of(
    deps: RunDeps,
    user_id: str,
    conversation: Conversation,
    record: ActiveRun,
    head_start: FirstRequest | None = None,
) -> Run:
    """The ``Run`` that produces ``record``'s reply in ``conversation``."""
    # A reply made again starts its turn afresh: the steps of the one it replaces are
    # not the model's to count (it is not shown them).
    regenerating = record.message is not None and record.message.regenerates is not None
    steps = 0 if regenerating else steps_since_user(conversation.messages)
    return Run(deps, user_id, conversation, record, steps, head_start)


def with_parts(draft: Draft, parts: Sequence[ContentPart]) -> Draft:
    """``draft`` with ``parts`` (its attachments) after its message's text."""
    if not parts:
        return draft
    content = [*draft.message.content, *parts]
    return dataclasses.replace(draft, message=draft.message.model_copy(update={"content": content}))


def new_conversation(
    user: User,
    conversation_id: str,
    user_message: Message,
    record: ActiveRun,
    notice: Message | None = None,
) -> Conversation:
    """The conversation a first message opens, with its run active (and ``notice``
    first, when there is one)."""
    now = record.started_at
    return Conversation(
        id=conversation_id,
        participant_ids=[user.uid],
        created_at=now,
        updated_at=now,
        last_message_at=now,
        messages=[user_message] if notice is None else [notice, user_message],
        active_run=record,
        document_id=user_message.document_id,
    )


def opening(
    draft: Draft, queue: QueueLimits, lapsed_by: datetime | None = None
) -> Callable[[Conversation | None], Conversation]:
    """The pure change that appends ``draft``'s message (or makes its conversation),
    given the conversation as stored (``None``: there is none); with ``lapsed_by``, it
    raises ``Lapsed`` for an active run whose lease lapsed by then. ``queue``: what may
    wait in a conversation."""
    user, conversation_id = draft.user, draft.conversation_id
    message, record = draft.message, draft.record

    def change(stored: Conversation | None) -> Conversation:
        if draft.new:
            if stored is not None:
                raise StoreError(f"conversation {conversation_id} already exists")
            return new_conversation(user, conversation_id, message, record, draft.notice)
        if stored is None:
            raise NotFound("No conversation with this id.")
        active = stored.active_run
        if lapsed_by is not None and active and active.lease_expires_at <= lapsed_by:
            raise Lapsed(active.run_id)
        if draft.regenerates is not None:
            return regenerate_run(stored, draft.regenerates, record)
        return open_run(stored, message, record, draft.when_busy, queue)

    return change
