"""A conversation as its owner reads it: its messages, the run producing one, and the
markers of its archived segments."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.schemas.documents.base import (
    ConversationKind,
    Document,
    FamilyRole,
    FinishReason,
    MessageStatus,
    Role,
    RunStatus,
    Timestamp,
    Via,
)
from shared.schemas.documents.parts import ContentPart
from shared.schemas.documents.tasks import TaskState


class Author(Document):
    """Who posted a user message."""

    user_id: str
    display_name: str | None = None
    role: FamilyRole | None = None
    # The author's account was erased (DESIGN §15): the message stays in the others'
    # copies, and no model is given it any more.
    deleted: bool | None = None


class MessageError(Document):
    """Why a message ended with status ``error``; ``message`` is shown to the user."""

    code: str
    message: str


# Also what one model call reports (``shared.llm.base.Finish.usage``): one type for both.
class Usage(Document):
    """Tokens the model provider counted for one message (all its steps together).

    ``cached_input_tokens`` are the part of ``input_tokens`` the provider read from its
    prompt cache (billed at a fraction of the price: docs/costs.md)."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cached_input_tokens: int = Field(default=0, ge=0)


MAX_STATE_CHARS = 16_384
"""The most opaque provider state one model step keeps (``shared.llm.base`` drops more)."""


class StepState(Document):
    """What the model provider asked to have back with one step of a message: opaque
    to everyone else (e.g. Anthropic's signed thinking blocks). ``step`` counts the
    message's model steps from 0; history sends it back only to ``provider``."""

    provider: str
    step: int = Field(ge=0)
    data: str = Field(max_length=MAX_STATE_CHARS)


Rating = Literal["up", "down"]
TitleSource = Literal["user", "auto"]
MAX_TITLE = 120
"""The longest title a person may give a conversation."""
MAX_AUTO_TITLE = 60
"""The longest title made for a conversation after its first reply."""
MAX_COMMENT = 2000


class Feedback(Document):
    """Its author's rating of one of Spark AI Agent's replies (and why), kept for quality
    review; the latest replaces the one before."""

    rating: Rating
    comment: str | None = Field(default=None, max_length=MAX_COMMENT)
    at: Timestamp


class Moderated(Document):
    """(Assistant replies) what the moderator stopped (DESIGN §16): the user's turn
    (``input``: the reply is a fixed, kind one, never the model's) or the reply itself
    (``output``: withheld), and the category; never the words."""

    direction: Literal["input", "output"]
    category: str


class Message(Document):
    """One entry of the append-only ``messages`` array (or a run's in-flight message).

    ``finish_reason`` says how an assistant message ended: ``length`` means the model
    hit its token limit, so the text is cut short, not a complete answer.
    """

    id: str
    role: Role
    author: Author | None = None
    created_at: Timestamp
    status: MessageStatus
    content: list[ContentPart]
    run_id: str | None = None
    model: str | None = None
    error: MessageError | None = None
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    # (User messages) the lesson open in the sender's editor: the conversation's
    # document from this message on.
    document_id: str | None = None
    provider_state: list[StepState] | None = None
    # (Messages between family members) typed by the author or sent by their agent.
    via: Via | None = None
    # (Messages sent by an agent) the other members whose words, as the sender's model
    # was given them, the text carries: their opt-out withholds it too, from every
    # reader's model (a relay inherits what it quotes).
    quotes: list[str] | None = None
    # (User messages) "voice": the transcript of an utterance spoken in a live-audio
    # session (DESIGN §9); unset for typed text.
    input: Literal["voice"] | None = None
    # (Assistant replies) the reply this one was made again for (the same user turn);
    # clients show the newest of a chain. The older reply stays: messages are append-only.
    regenerates: str | None = None
    # (Assistant replies) what its author thought of it.
    feedback: Feedback | None = None
    # (Assistant replies) the moderator stopped the turn or the reply (DESIGN §16).
    moderated: Moderated | None = None

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(part.text or "" for part in self.content if part.type == "text")


class ActiveRun(Document):
    """The run currently producing a reply: the durable record of it, cleared when it ends.

    ``message`` is the reply while it streams, kept outside ``messages`` so that each
    streaming write sends only this field, whatever the conversation's length. Clients
    render ``messages`` followed by ``message``. When the run ends, the finished message
    is appended to ``messages`` and this record is removed, in one write.
    """

    run_id: str
    status: RunStatus
    assistant_message_id: str
    user_message_id: str | None = None
    started_at: Timestamp
    lease_expires_at: Timestamp
    stop_requested_at: Timestamp | None = None
    message: Message | None = None
    # Why a queued run has not started, for the user to read (every one of their run
    # slots is taken: it starts as soon as one frees); cleared when it starts.
    waiting_for: str | None = None


class ArchiveMarker(Document):
    """How much of the conversation has rolled over into ``archive/``: the first
    ``segments`` segments (ids ``000001``…) hold the oldest ``count`` messages, the
    newest of them ``newest_id``. A segment past ``segments`` is a move under way:
    its messages are still in the live document, so readers skip it.

    ``unindexed`` is the server's bookkeeping: the first ``unindexed`` segments were
    written before the files their messages name were indexed (each segment written
    since indexes them, server-only), and the first file lookup in the conversation
    indexes those once; absent (every marker written before the index), all of them.
    """

    count: int = Field(ge=0)
    newest_id: str
    segments: int = Field(ge=0)
    unindexed: int | None = Field(default=None, ge=0)

    @property
    def legacy(self) -> int:
        """How many of the first segments have no entries in the file index."""
        return self.segments if self.unindexed is None else min(self.unindexed, self.segments)


class ArchiveClaim(Document):
    """A roll-over under way (one at a time per conversation): it writes ``segment``,
    then moves the marker; a claim past ``until`` belongs to a move that died."""

    segment: int = Field(ge=1)
    until: Timestamp


class ArchiveSegment(Document):
    """``/{userId}/client/conversations/{conversationId}/archive/{segment}``: older
    messages, in order (the owner reads them; a query by id pages them)."""

    conversation_id: str
    segment: int = Field(ge=1)
    messages: list[Message]
    created_at: Timestamp


class Conversation(Document):
    """``/{userId}/client/conversations/{conversationId}``."""

    id: str
    kind: ConversationKind = "agent"
    participant_ids: list[str]
    family_id: str | None = None
    title: str | None = Field(default=None, max_length=MAX_TITLE)
    # Who gave the title: its owner (never replaced by a title made automatically), or
    # the one made after the first reply.
    title_source: TitleSource | None = None
    created_at: Timestamp
    updated_at: Timestamp
    last_message_at: Timestamp
    messages: list[Message] = Field(default_factory=list)
    active_run: ActiveRun | None = None
    archived: ArchiveMarker | None = None
    archiving: ArchiveClaim | None = None
    # User messages sent with ``whenBusy: "queue"`` while a run was live, in order: each
    # moves to ``messages`` when its own run opens, so replies follow their questions.
    queued_messages: list[Message] | None = None
    tasks: dict[str, TaskState] | None = None
    # The lesson the document tools work on: the last one a user message named
    # (``documentId``) or ``create_lesson`` made here, whichever came later.
    document_id: str | None = None

    def message(self, message_id: str) -> Message | None:
        """The finished message with this id, if the conversation holds it."""
        for message in reversed(self.messages):
            if message.id == message_id:
                return message
        return None
