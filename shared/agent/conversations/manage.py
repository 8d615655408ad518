"""What a person does with their conversations (DESIGN §15): rename one, rate a reply,
and delete one, with everything kept of it.

A delete ends everything in flight by the store's preconditions, not by anything
remembered here: the document goes first (on the condition that it is the version
read), so every later write of a run, a task, a follow-up or a roll-over, in any
process, is refused (``NotFound``) instead of making it again; what hangs off it
(archive segments, task sections, files, spoken replies) goes after, so nothing written
before the document went is left behind. Each step is idempotent: a delete that failed
half-way is finished by the next (and a second delete finds nothing: 204 again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared.clock import Clock
from shared.errors import ConversationTouched, NotFound, RequestError
from shared.families.messages import is_shared
from shared.queue.port import TaskPort
from shared.schemas.documents import Conversation, Feedback, Message, Rating
from shared.schemas.server import FeedbackRecord
from shared.store.base import ConversationStore, TaskDocumentStore
from shared.store.feedback import FeedbackStore
from shared.store.files import FileStore
from shared.voice.speech import speech_prefix

log = logging.getLogger(__name__)

NO_CONVERSATION = "No conversation with this id."
NO_MESSAGE = "No finished message with this messageId in this conversation."
NOT_A_REPLY = "Only Spark AI Agent's replies can be rated."


def renamed(conversation: Conversation, title: str) -> Conversation:
    """The conversation titled ``title`` by its owner (``titleSource: user``)."""
    if conversation.title == title and conversation.title_source == "user":
        return conversation
    return conversation.model_copy(update={"title": title, "title_source": "user"})


def titled(conversation: Conversation, title: str) -> Conversation:
    """The conversation titled ``title`` automatically, if it has no title yet: one its
    owner gave is never replaced, nor one made before (unchanged then)."""
    if conversation.title is not None or conversation.title_source is not None or not title:
        return conversation
    return conversation.model_copy(update={"title": title, "title_source": "auto"})


def rated(message_id: str, feedback: Feedback) -> Callable[[Conversation], Conversation]:
    """The change that keeps ``feedback`` on the reply ``message_id``.

    Raises (from the change):
        NotFound: no finished message with this id in the live conversation.
        RequestError: the message is not one of Spark AI Agent's replies.
    """

    def change(conversation: Conversation) -> Conversation:
        messages = list(conversation.messages)
        for index, message in enumerate(messages):
            if message.id == message_id:
                if message.role != "assistant":
                    raise RequestError(NOT_A_REPLY)
                if message.feedback == feedback:
                    return conversation
                messages[index] = message.model_copy(update={"feedback": feedback})
                return conversation.model_copy(update={"messages": messages})
        raise NotFound(NO_MESSAGE)

    return change


@dataclass(frozen=True, slots=True)
class Rated:
    """A reply's feedback, as kept."""

    conversation_id: str
    message: Message
    feedback: Feedback


class Conversations:
    """Renames, rates and deletes a person's conversations; one per process."""

    def __init__(
        self,
        store: ConversationStore,
        sections: TaskDocumentStore,
        files: FileStore,
        tasks: TaskPort,
        clock: Clock,
        feedback: FeedbackStore,
    ) -> None:
        self._store = store
        self._sections = sections
        self._files = files
        self._tasks = tasks
        self._clock = clock
        self._feedback = feedback

    async def rename(self, user_id: str, conversation_id: str, title: str) -> Conversation:
        """Give the conversation ``title`` (checked at the edge: 1-120 characters); a
        title made automatically never replaces it.

        Raises:
            NotFound: the user has no conversation with this id (nothing changed).
        """
        return await self._store.mutate(user_id, conversation_id, lambda c: renamed(c, title))

    async def rate(
        self,
        user_id: str,
        conversation_id: str,
        message_id: str,
        rating: Rating,
        comment: str | None,
    ) -> Rated:
        """Keep the owner's ``rating`` (and ``comment``) of a reply on it (the latest
        replaces an earlier one): they see it as the message's ``feedback``; the server
        keeps it for quality review.

        Raises:
            NotFound: no such conversation, or no finished message with this id in it.
            RequestError: the message is not a reply of Spark AI Agent's.
        """
        feedback = Feedback(rating=rating, comment=comment or None, at=self._clock.now())
        conversation = await self._store.mutate(
            user_id, conversation_id, rated(message_id, feedback)
        )
        message = conversation.message(message_id)
        assert message is not None and message.feedback is not None  # (the change kept it)
        # After the message holds it: a rating refused above keeps nothing here either.
        record = FeedbackRecord(
            conversation_id=conversation_id,
            message_id=message_id,
            rating=rating,
            comment=message.feedback.comment,
            at=message.feedback.at,
            model=message.model,
        )
        await self._feedback.keep(user_id, record)
        return Rated(conversation_id, message, message.feedback)

    async def delete(
        self, user_id: str, conversation_id: str, *, untouched_before: datetime | None = None
    ) -> bool:
        """Delete the user's copy of the conversation and everything kept of it: its run
        stopped (its next write is refused), its tasks cancelled, the document, its
        archive segments, task sections, files and spoken replies gone. A ``direct`` or
        ``family`` conversation loses only this user's copy (the others' stay, with the
        files they name). Idempotent: a conversation deleted already is no error.

        With ``untouched_before`` (the retention sweep: ``retention.Retention``), only a
        conversation last changed before then is deleted, judged on the version the
        delete removes (``ConversationStore.delete``); one touched since is kept, and
        so are its tasks, which are cancelled only once the document is gone.

        Returns:
            Whether it was deleted (``False``: kept, touched since ``untouched_before``).

        Raises:
            NotFound: the user has no conversation with this id, and deleted none.
            StoreError: the store failed (again finishes what is left).
        """
        conversation = await self._store.get(user_id, conversation_id)
        shared = is_shared(conversation_id) or (
            conversation is not None and conversation.kind != "agent"
        )
        if untouched_before is not None:
            if conversation is not None and conversation.updated_at >= untouched_before:
                return False
            # The tasks after the document: a conversation touched between the read
            # above and the delete is kept, with its tasks. Cancelled even when only
            # the tombstone was there (a user's delete that failed after the document).
            try:
                named = await self._store.delete(
                    user_id, conversation_id, self._clock.now(), untouched_before=untouched_before
                )
            except ConversationTouched:
                return False
            if not shared:
                await self._tasks.cancel_conversation(user_id, conversation_id)
        else:
            if conversation is not None and not shared:
                # Before the document goes (a delete that fails after it finds none to
                # cancel).
                await self._tasks.cancel_conversation(user_id, conversation_id)
            named = await self._store.delete(user_id, conversation_id, self._clock.now())
        await self._sections.delete(user_id, conversation_id)
        await self._feedback.forget(user_id, conversation_id)
        # Only the user's own files, and none a member's copy still names.
        own = [] if shared else [p for p in named if p.startswith(f"{user_id}/")]
        await self._files.delete(own, prefix=speech_prefix(user_id, conversation_id))
        log.info("conversation %s deleted (%d files)", conversation_id, len(own))
        return True
