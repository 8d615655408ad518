"""A turn of an AI SDK chat (``POST /api/spark/agent/chat``): what the transport's body
asks (``schemas/uichat.turn``), checked against the conversation as stored, done by the
same parts as our own routes (``Opening.send``, ``People``), and answered as the UI
message stream (``uistream``).

The stored conversation is the truth: a user's message is taken as a new message; an
approval or a client tool's output is taken only for a call that waits for one now,
in a fresh read of the document. A part that answers a call already answered is the
client's history, and ignored; a part naming a call the conversation does not have is
refused (404), as our own routes refuse it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from shared.agent.run.loop import Run
from shared.agent.sending.opening import Opening
from shared.agent.stream.replay import tool_end
from shared.agent.stream.sse import Framing
from shared.agent.stream.transcript import args_of
from shared.agent.stream.uistream import (
    DONE,
    UI,
    Chunk,
    encode,
    following,
    going_on,
    task_part,
    tool_denied,
    tool_ended,
    tool_input,
)
from shared.agent.waiting.people import People, Resumed
from shared.agent.waiting.results import answered, find_call, follow_up_id
from shared.agent.waiting.whose import PersonKind, person_kind
from shared.attachments.service import Requested
from shared.attachments.uploads import Uploads
from shared.auth.base import User
from shared.errors import NotFound, PayloadTooLarge, RequestError, UnsupportedMediaType
from shared.families.messages import is_shared
from shared.ids import task_id_for
from shared.schemas.api import AnswersRequest
from shared.schemas.documents import Conversation, TaskStatus
from shared.schemas.uichat import (
    ChatFile,
    ChatRequest,
    ChatTurn,
    FileNotTaken,
    FileTooLarge,
    UnreadablePart,
    turn,
)
from shared.store.base import ConversationStore

NOTHING_WAITS = (
    "Nothing in this message answers a call that waits: its approvals and tool outputs "
    "were answered already. Send a new message instead."
)
FAMILY_CHAT = (
    "A chat is with Spark AI Agent: this id names a conversation between family members, "
    "whose messages are sent with POST /api/spark/agent/messages."
)

Stream = Callable[[Run, Framing], AsyncIterator[bytes]]
Resume = Callable[[str, str, Framing], Awaitable[AsyncIterator[bytes] | None]]
_ENDED: tuple[TaskStatus, ...] = ("completed", "failed", "cancelled")


def waiting_for(conversation: Conversation) -> dict[str, PersonKind]:
    """The calls of the conversation that wait for a person now, by what they wait for."""
    done = answered(conversation)
    waiting: dict[str, PersonKind] = {}
    for message in conversation.messages:
        for part in message.content:
            call = part.tool_call
            if call is None or call.id in done:
                continue
            kind = person_kind(call)
            # An approval waits only until it is decided; the others until answered.
            if kind is not None and (kind != "approval" or call.status == "awaiting_approval"):
                waiting[call.id] = kind
    return waiting


def followed(conversation: Conversation) -> list[Chunk]:
    """What a resumed follow-up opens with: each call of the message it follows, with its
    result, as the AI SDK shows a call (its input, then its output, error or denial), and
    a task's section in its final state under the id it was queued with (a data part
    with the same id replaces the earlier one); empty when the active run follows none."""
    active = conversation.active_run
    if active is None:
        return []
    source = next(
        (m for m in conversation.messages if follow_up_id(m.id) == active.assistant_message_id),
        None,
    )
    if source is None:
        return []
    results = {
        p.tool_result.tool_call_id: p.tool_result
        for m in conversation.messages
        for p in m.content
        if p.tool_result is not None
    }
    out: list[Chunk] = []
    for part in source.content:
        call = part.tool_call
        result = results.get(call.id) if call is not None else None
        if call is None or result is None:
            continue
        out.append(tool_input(call.id, call.name, args_of(call.args_json)))
        if call.status == "denied":
            out.append(tool_denied(call.id))
            continue
        out.append(tool_ended(tool_end(call, result)))
        if call.execution == "task":
            task_id = task_id_for(conversation.id, call.id)
            pointer = (conversation.tasks or {}).get(task_id)
            status: TaskStatus = "completed" if result.status == "ok" else "failed"
            if pointer is not None and pointer.status in _ENDED:
                status = pointer.status
            out.append(task_part(task_id, call.id, call.name, status, call.display_text))
    return out


async def _said(note: Chunk, finish: str) -> AsyncIterator[bytes]:
    """A stream of one note: a message started, the note in a step of its own, and its
    end. The step matters to a front end that sends once the last step's approvals are
    answered (``lastAssistantMessageIsCompleteWithApprovalResponses``): after an
    approval, the note's step is the last, so the same answers are not sent again."""
    chunks: list[Chunk] = [
        {"type": "start"},
        {"type": "start-step"},
        note,
        {"type": "finish-step"},
        {"type": "finish", "finishReason": finish},
    ]
    yield b"".join(encode(c) for c in chunks) + DONE


def _accepted(resumed: Resumed) -> AsyncIterator[bytes]:
    """A short stream for a turn the agent goes on from elsewhere: an approved call runs
    on a task, or other calls of the step still wait. Its reply arrives through
    Firestore, or by resuming the chat's stream."""
    return _said({"type": "data-accepted", "data": {"status": resumed.status}}, "tool-calls")


class Chats:
    """The AI SDK's chat turns, on the parts our own routes use."""

    def __init__(
        self, opening: Opening, people: People, store: ConversationStore, uploads: Uploads
    ) -> None:
        self._opening = opening
        self._people = people
        self._store = store
        self._uploads = uploads

    async def turn(self, user: User, request: ChatRequest, stream: Stream) -> AsyncIterator[bytes]:
        """The reply to one chat request, as the UI message stream.

        Raises:
            RequestError: a regenerate of anything but the last reply, a part the server
                cannot take, or nothing that waits answered.
            NotFound, RunInProgress, RateLimited, AlreadyAnswered: as our own routes.
        """
        if is_shared(request.id):
            raise RequestError(FAMILY_CHAT)
        if request.trigger == "regenerate-message":
            # The transport's regenerate: our own (``Opening.regenerate``), on the reply
            # it names (none: the last); the history is Firestore's: ``messages`` unread.
            sent = await self._opening.regenerate(user, request.id, request.message_id)
            assert sent.run is not None  # (streamed here: no task produces it)
            return stream(sent.run, UI)
        try:
            # Off the event loop: a file's data: URL is decoded here (up to 25 MB).
            asked = await asyncio.to_thread(turn, request)
        except FileTooLarge as exc:
            raise PayloadTooLarge(str(exc)) from None
        except FileNotTaken as exc:
            raise UnsupportedMediaType(str(exc)) from None
        except UnreadablePart as exc:
            raise RequestError(str(exc)) from None
        if asked.text is not None:
            kept: list[Requested] = []
            try:
                for file in asked.files:  # one by one: those kept before a refusal undone
                    kept.append(await self._kept(user.uid, file))
                sent = await self._opening.send(
                    user,
                    asked.text,
                    request.id,
                    when_busy=request.when_busy,
                    document_id=request.document_id,
                    attachments=kept,
                    listening=True,
                    create=True,
                )
            except RequestError:
                # Refused (404, 409, 429, a file the rules refuse) before its message
                # was written: its files are not left behind, nor counted as uploads.
                await self._uploads.give_back(user.uid, [k.storage_path for k in kept])
                raise
            if sent.run is None:  # it waits its turn behind a live run
                queued: Chunk = {"type": "data-queued", "data": {"messageId": sent.user_message_id}}
                return _said(queued, "other")
            return stream(sent.run, UI)
        resumed = await self._answer(user.uid, request.id, asked)
        if resumed.run is not None:
            denied = [a.tool_call_id for a in asked.approvals if not a.approved]
            return stream(resumed.run, going_on(denied))
        return _accepted(resumed)

    async def resume(
        self, user_id: str, conversation_id: str, resume: Resume
    ) -> AsyncIterator[bytes] | None:
        """The transport's resume: the reply being written, from its start, then live
        (``None``: none is). A follow-up opens with the results of the calls it follows
        (``followed``), which the client has not seen in any stream."""
        conversation = await self._store.get(user_id, conversation_id)
        if conversation is None:
            raise NotFound("No conversation with this id.")
        opening = followed(conversation)
        return await resume(user_id, conversation_id, following(opening) if opening else UI)

    async def _kept(self, user_id: str, file: ChatFile) -> Requested:
        """A chat's file, written where an upload would be, as a message's attachment:
        from here on it is judged and read as any uploaded file is."""
        path = await self._uploads.keep(user_id, file.name, file.media_type, file.data)
        return Requested(path, file.media_type, len(file.data))

    async def _answer(self, user_id: str, conversation_id: str, asked: ChatTurn) -> Resumed:
        """Each approval and output in ``asked`` for a call that waits, as our own routes
        take them (``People``); the last one's outcome says how the agent goes on."""
        conversation = await self._store.get(user_id, conversation_id)
        if conversation is None:
            raise NotFound("No conversation with this id.")
        waiting = waiting_for(conversation)
        resumed: Resumed | None = None
        for approval in asked.approvals:
            if self._known(conversation, approval.tool_call_id, waiting):
                resumed = await self._people.decide(
                    user_id,
                    conversation_id,
                    approval.tool_call_id,
                    approved=approval.approved,
                    reason=approval.reason,
                    background=False,
                )
        for output in asked.outputs:
            call_id = output.tool_call_id
            if not self._known(conversation, call_id, waiting):
                continue
            if waiting[call_id] == "question":
                answers = AnswersRequest.model_validate(
                    {"toolCallId": call_id, "answers": output.output}
                ).answers
                resumed = await self._people.answer(
                    user_id, conversation_id, call_id, dict(answers), background=False
                )
            else:
                resumed = await self._people.submit_result(
                    user_id,
                    conversation_id,
                    call_id,
                    output.output,
                    ok=output.status == "ok",
                    background=False,
                )
        if resumed is None:
            raise RequestError(NOTHING_WAITS)
        return resumed

    @staticmethod
    def _known(conversation: Conversation, call_id: str, waiting: dict[str, PersonKind]) -> bool:
        """Whether ``call_id`` waits now (``False``: answered already, the client's
        history).

        Raises:
            NotFound: the conversation has no such call.
        """
        if call_id in waiting:
            return True
        if find_call(conversation, call_id) is None:
            raise NotFound("No tool call with this id in this conversation.")
        return False
