"""The Firestore documents web clients read (DESIGN §3).

Field names are camelCase in Firestore and snake_case in Python. Documents are
written only by our functions; ``extra="allow"`` keeps fields written by a newer
version intact when an older instance rewrites the messages array.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

Timestamp = Annotated[
    datetime,
    WithJsonSchema(
        {
            "type": "object",
            "title": "Timestamp",
            "description": "A Firestore Timestamp (seconds and nanoseconds since the epoch, UTC).",
            "properties": {"seconds": {"type": "integer"}, "nanoseconds": {"type": "integer"}},
        }
    ),
]

Role = Literal["user", "assistant", "tool", "system"]
MessageStatus = Literal["streaming", "complete", "error", "waiting", "stopped"]
PartType = Literal["text", "image", "file", "tool_call", "tool_result"]
Execution = Literal["inline", "task", "client", "question"]
ToolCallStatus = Literal[
    "pending", "awaiting_approval", "queued", "running", "complete", "error", "denied", "cancelled"
]
TaskStatus = Literal["queued", "running", "waiting_on_user", "completed", "failed", "cancelled"]
RunStatus = Literal["queued", "streaming", "stopping"]
"""``queued``: opened, waiting for a Cloud Task to produce it (a ``202`` send or a queued
message). ``streaming``: an instance is producing it. ``stopping``: the owner asked it to
stop; its producer ends it within about a second."""
FamilyRole = Literal["parent", "dependent"]
ConversationKind = Literal["agent", "direct", "family"]
"""``agent``: a user with Spark AI Agent; ``direct``: two family members (a copy in each
one's subtree); ``family``: the whole family (a copy in each member's)."""
Via = Literal["user", "agent"]
"""How a member's message to others was sent: typed by them, or by their agent (with
their approval)."""
ModelFinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
"""Why the model ended a step, as every provider's adapter reports it."""
FinishReason = Literal[ModelFinishReason, "stopped", "error"]
"""Why a message ended: its last step's ``ModelFinishReason``, or ``stopped``/``error``
when the run ended it."""


class Document(BaseModel):
    """Base of everything stored in Firestore."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", validate_assignment=True
    )

    def to_firestore(self) -> dict[str, Any]:
        """The document as Firestore stores it (camelCase, no unset optionals)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class Author(Document):
    """Who posted a user message."""

    user_id: str
    display_name: str | None = None
    role: FamilyRole | None = None


class FileRef(Document):
    """A file in Cloud Storage under the user's own prefix.

    For an image, ``storage_path`` is the normalised JPEG (no metadata) the server wrote
    beside the upload, ``original_path``; for a PDF it is the upload itself, and
    ``text_path`` the text extracted from it (``text_chars`` long, with page markers).
    A voice clip is the upload itself, ``duration_seconds`` long (as decoded); its
    transcript is the message's text.
    """

    storage_path: str
    content_type: str
    size_bytes: int = Field(ge=0)
    name: str | None = None
    original_path: str | None = None
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    page_count: int | None = Field(default=None, ge=0)
    text_path: str | None = None
    text_chars: int | None = Field(default=None, ge=0)
    duration_seconds: float | None = Field(default=None, ge=0)


class ToolCall(Document):
    """The model asked for a tool to run.

    ``execution`` says who carries it out: the server in the stream (``inline``) or on
    Cloud Tasks (``task``), the user's client (``client``), or the user, answering
    (``question``). ``approval`` marks a call that waited for the owner's approval.
    """

    id: str
    name: str
    args_json: str
    display_text: str
    execution: Execution
    status: ToolCallStatus
    approval: bool | None = None
    # A question a task asked (``ask_user_question``, in a message of its own): the task
    # call it is for. Its answer lets that task go on, in the same section; the agent
    # does not follow it up.
    for_call: str | None = None


class ToolResult(Document):
    """What a tool gave back, fed to the model on the next step."""

    tool_call_id: str
    output_json: str
    status: Literal["ok", "error"]
    hidden: bool | None = None
    # A lesson the tool created or changed, and its version after the change.
    document_id: str | None = None
    document_version: int | None = None


_PAYLOAD_OF: dict[str, str] = {
    "text": "text",
    "image": "file",
    "file": "file",
    "tool_call": "tool_call",
    "tool_result": "tool_result",
}


MAX_DESCRIPTION_CHARS = 600
"""The longest ``description`` of a visual part (a few spoken sentences)."""

_NEEDS_DESCRIPTION: JsonDict = {
    # Every part but text is shown, not read: it says what it shows in words too.
    "if": {"properties": {"type": {"const": "text"}}},
    "else": {"required": ["description"]},
}


def short(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters (with an ellipsis)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _file_description(kind: str, file: FileRef) -> str:
    name = f"“{file.name}”" if file.name else "a file"
    if kind == "image":
        return f"An image: {name}."
    if file.page_count:
        pages = "page" if file.page_count == 1 else "pages"
        return f"A PDF, {name}, of {file.page_count} {pages}."
    if file.content_type.startswith("audio/"):
        return f"A voice recording: {name}."
    return f"A file: {name}."


def _question_description(call: ToolCall) -> str:
    """An ``ask_user_question`` call as it is heard: each question and its options."""
    try:
        questions = json.loads(call.args_json or "{}").get("questions") or []
    except (ValueError, AttributeError):
        questions = []
    said = []
    for question in questions if isinstance(questions, list) else []:
        if not isinstance(question, dict):
            continue
        options = [
            str(o.get("label") if isinstance(o, dict) else o) for o in question.get("options") or []
        ]
        choice = f" The choices are: {', '.join(options)}." if options else ""
        said.append(f"{str(question.get('question') or '').strip()}{choice}")
    return " ".join(said) or call.display_text


def describe(part: ContentPart) -> str | None:
    """What a part shows, said in words: a description for a part written without one
    (or stored before parts had them), within ``MAX_DESCRIPTION_CHARS`` (it is set
    without validation: a longer one, from a long display text or question, would make
    the stored conversation unreadable). Text needs none."""
    said = _described(part)
    return None if said is None else short(said)


def _described(part: ContentPart) -> str | None:
    if part.file is not None:
        return _file_description(part.type, part.file)
    call = part.tool_call
    if call is not None:
        if call.execution == "question":
            return "Spark AI Agent asks: " + _question_description(call)
        return f"{call.display_text}."
    result = part.tool_result
    if result is not None:
        if result.status == "error":
            return "A step did not work."
        if result.document_id is not None:
            return f"A lesson card, at version {result.document_version or 1}."
        return "A step's result."
    return None


class ContentPart(Document):
    """One ordered part of a message; ``type`` says which payload field is set.

    Every part but text carries a short ``description`` of what it shows (DESIGN §9),
    so a spoken reply can say it in its place: the writer gives one that says what the
    part is about ("A lesson card: …"); a part written without one gets ``describe``'s.
    """

    model_config = ConfigDict(json_schema_extra=_NEEDS_DESCRIPTION)

    type: PartType
    text: str | None = None
    file: FileRef | None = None
    tool_call: ToolCall | None = None
    tool_result: ToolResult | None = None
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)

    @model_validator(mode="after")
    def _payload_matches_type(self) -> ContentPart:
        needed = _PAYLOAD_OF[self.type]
        if getattr(self, needed) is None:
            raise ValueError(f"a {self.type!r} part needs {needed!r}")
        if self.type != "text" and not self.description:
            # Not an assignment: that would validate the whole part again.
            self.__dict__["description"] = describe(self)
        return self

    @classmethod
    def of_text(cls, text: str) -> ContentPart:
        return cls(type="text", text=text)


class MessageError(Document):
    """Why a message ended with status ``error``; ``message`` is shown to the user."""

    code: str
    message: str


# Also what one model call reports (``shared.llm.base.Finish.usage``): one type for both.
class Usage(Document):
    """Tokens the model provider counted for one message (all its steps together)."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)


MAX_STATE_CHARS = 16_384
"""The most opaque provider state one model step keeps (``shared.llm.base`` drops more)."""


class StepState(Document):
    """What the model provider asked to have back with one step of a message: opaque
    to everyone else (e.g. Anthropic's signed thinking blocks). ``step`` counts the
    message's model steps from 0; history sends it back only to ``provider``."""

    provider: str
    step: int = Field(ge=0)
    data: str = Field(max_length=MAX_STATE_CHARS)


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
    # (User messages) "voice": the transcript of an utterance spoken in a live-audio
    # session (DESIGN §9); unset for typed text.
    input: Literal["voice"] | None = None

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


class TaskState(Document):
    """A long-running tool call's progress, shown in the conversation."""

    status: TaskStatus
    tool: str
    tool_call_id: str
    display_text: str
    updated_at: Timestamp
    error: str | None = None
    progress: str | None = None  # e.g. "Creating lesson 2 of 5", while it runs
    # False once the run that queued it was stopped: its result is kept, nobody follows up.
    follow_up: bool | None = None


class TaskUpdate(Document):
    """One progress step of a task, in order (``seq``). ``attempt`` and ``step`` key it:
    the same step of the same attempt, delivered again, is not appended twice. ``folded``
    says how many older steps this line stands for ("… 12 earlier steps")."""

    seq: int = Field(ge=1)
    at: Timestamp
    text: str
    description: str | None = None
    attempt: int = 0
    step: int = 0
    folded: int | None = None


_KEY_OUTPUT_KINDS = {
    "lesson": "A lesson card",
    "planned_lesson": "A planned lesson's card",
    "strength": "A strength",
    "correction": "A correction",
    "mark": "The mark",
    "try": "What to try",
}


class KeyOutput(Document):
    """One thing a finished task produced, for its section: a lesson (``documentId``),
    a planned lesson, a strength, a correction, a mark, or what to try after a failure.
    ``description`` says it in words, as a spoken reply reads it (DESIGN §9)."""

    model_config = ConfigDict(json_schema_extra={"required": ["kind", "text", "description"]})

    kind: str
    text: str
    document_id: str | None = None
    outline: list[str] | None = None
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)

    @model_validator(mode="after")
    def _described(self) -> KeyOutput:
        if not self.description:
            label = _KEY_OUTPUT_KINDS.get(self.kind, "An outcome")
            outline = f" It covers: {'; '.join(self.outline)}." if self.outline else ""
            self.__dict__["description"] = short(f"{label}: {self.text}.{outline}")
        return self


class TaskDocument(Document):
    """``/{userId}/client/tasks/{taskId}``: a task's section, as a client renders it.

    Its status moves only as ``shared/tasks/sections.TRANSITIONS`` allows; ``summary``
    and ``keyOutputs`` are written in the same write as its terminal status, so a
    finished task stays readable after its call has rolled over into the archive.
    """

    id: str
    conversation_id: str
    tool_call_id: str
    tool: str
    title: str
    status: TaskStatus
    created_at: Timestamp
    updated_at: Timestamp
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    updates: list[TaskUpdate] = Field(default_factory=list)
    summary: str | None = None
    key_outputs: list[KeyOutput] | None = None
    # The question a ``waiting_on_user`` task waits on (the ask_user_question call).
    question: str | None = None


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
    title: str | None = None
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


class Lesson(Document):
    """``/{userId}/client/lessons/{lessonId}``: a lesson document the agent reads and
    edits. ``body`` is lesson XML (``shared/lessons/grammar.py``), valid whenever it is
    stored; ``version`` grows by one with each change (edits name the version they
    were made against), and the version a change replaces is kept (``LessonVersion``)."""

    id: str
    title: str = Field(min_length=1, max_length=200)
    body: str
    version: int = Field(ge=1)
    # "writing" while a task is still writing it (a planned lesson, titled, not drafted).
    status: Literal["writing", "ready"] = "ready"
    topic: str | None = None
    audience: str | None = None
    duration_minutes: int | None = Field(default=None, ge=1)
    objectives: list[str] | None = None
    created_at: Timestamp
    updated_at: Timestamp
    conversation_id: str | None = None
    tool_call_id: str | None = None
    model: str | None = None


class LessonVersion(Lesson):
    """``/{userId}/client/lessons/{lessonId}/versions/{version}``: the lesson as it was at
    ``version``, kept in the same write as the change that replaced it (or the deletion
    that removed it). The newest ``SPARK_LESSON_VERSIONS_KEPT`` are kept; the owner reads
    them like the lesson and restores one through the API. ``characters`` is the body's
    length, so a listing need not read the bodies."""

    characters: int = Field(ge=0)

    @classmethod
    def of(cls, lesson: Lesson) -> LessonVersion:
        return cls.model_validate({**lesson.to_firestore(), "characters": len(lesson.body)})

    def as_lesson(self) -> Lesson:
        """The lesson this version was (without the listing's ``characters``)."""
        document = self.to_firestore()
        document.pop("characters", None)
        return Lesson.model_validate(document)


class FamilyMember(Document):
    """One member of a family, as every member sees them (DESIGN §8)."""

    user_id: str
    display_name: str = Field(min_length=1, max_length=80)
    role: FamilyRole
    joined_at: Timestamp


class FamilyMirror(Document):
    """``/{userId}/client/family/current``: the user's family as they may read it.

    The truth is server-only (``/families/{familyId}``); every change to the family
    rewrites each member's mirror in the same transaction, and a member who leaves (or
    is removed, or whose family ends) loses theirs in it too.
    """

    family_id: str
    name: str = Field(min_length=1, max_length=80)
    my_role: FamilyRole
    members: list[FamilyMember]
    updated_at: Timestamp


class UserSettings(Document):
    """``/{userId}/client/settings/current``: the user's settings as they may read them
    (DESIGN §8). The truth is server-only (``/{userId}/server/settings/current``, the same
    fields), written with this mirror in one batch by ``PATCH /api/spark/me/settings``;
    a user without either has the defaults.

    ``ai_reads_family_messages`` false: no family message this user wrote is given to any
    model (theirs or another member's), and their own agent reads no family messages;
    checked in the store at each model call, so it holds from the next one on.
    """

    ai_reads_family_messages: bool = True
    updated_at: Timestamp | None = None
