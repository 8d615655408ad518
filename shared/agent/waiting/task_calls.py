"""What a task's delivery finds of its tool call in the conversation, judged in one
pure call each time the tasks handler looks (``tasks/handler.py``): before it runs the
tool (``begin_tool``: run it, wait, or leave it, with the change that starts it or
records its user's cancel, in the write that judged it) and once the call has its result
(``after_result``: whether the agent follows up, and how the task ends). The handler
acts on the verdict; the rules that make it are the agent's (``results.py``,
``questions.py``). ``TaskCalls`` makes the writes these take, so the handler, which
reaches the agent only through ``Agent``, writes no conversation itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Literal

from shared.agent.waiting.questions import answer_of, ask_for_task, task_question
from shared.agent.waiting.results import (
    CANCELLED_BY_USER,
    answered,
    approved,
    cancel_by_user,
    find_call,
    mark_running,
    record_results,
    wants_follow_up,
)
from shared.clock import Clock
from shared.errors import NotFound
from shared.queue.port import Ended
from shared.schemas.documents import Conversation, Message, ToolCall, ToolResult
from shared.store.base import ConversationStore
from shared.tools.execute import ToolOutcome
from shared.tools.people import answer_text, question_text

# What a task that failed says, in its section, unless the caller has better words.
TOOL_FAILED = "The tool failed."

Found = Literal["unsaved", "gone", "answered", "unapproved", "asked", "cancel", "run"]
"""``unsaved``: the run that made the call has not saved it yet (come back shortly);
``gone``: no conversation or no such call; ``answered``: it has its result already;
``unapproved``: its approval has not landed, or it was denied (never run it); ``asked``:
its question to the user waits unanswered; ``cancel``: its user asked it to stop;
``run``: run the tool (with the user's ``answer`` to its question, if it asked one)."""


@dataclass(frozen=True, slots=True)
class BeforeTool:
    """The verdict before the tool runs; ``message`` and ``call`` unless ``unsaved`` or
    ``gone``; ``text``: the question (``asked``) or the user's answer to it (``run``)."""

    found: Found
    message: Message | None = None
    call: ToolCall | None = None
    text: str | None = None


def before_tool(
    conversation: Conversation | None, call_id: str, cancel_requested: bool
) -> BeforeTool:
    """What a delivery of ``call_id``'s task does first (``cancel_requested``: the
    ledger says its user asked it to stop)."""
    found = None if conversation is None else find_call(conversation, call_id)
    if conversation is None or found is None:
        live = conversation is not None and conversation.active_run is not None
        return BeforeTool("unsaved" if live else "gone")
    message, call = found
    if call.id in answered(conversation):
        # It ran approved: only its follow-up may be left.
        return BeforeTool("answered", message, call)
    if not approved(call):
        return BeforeTool("unapproved", message, call)
    question = task_question(conversation, call.id)
    answer = None if question is None else answer_of(conversation, question.id)
    if question is not None and answer is None:
        # Asked, not yet answered (the attempt that asked died before it waited).
        return BeforeTool("asked", message, call, question_text(question.args_json))
    if cancel_requested:
        return BeforeTool("cancel", message, call)
    said = None if answer is None else answer_text(answer.output_json)
    return BeforeTool("run", message, call, said)


def begin_tool(
    conversation: Conversation, call_id: str, cancel_requested: bool, now: datetime
) -> tuple[Conversation, BeforeTool]:
    """``before_tool``, and the change its verdict makes, for ``ConversationStore.apply``
    (judged and written on one version): ``run`` shows the call running, ``cancel``
    gives it its user's cancel as its result; any other verdict changes nothing."""
    seen = before_tool(conversation, call_id, cancel_requested)
    if seen.found == "run":
        return mark_running(conversation, call_id, now), seen
    if seen.found == "cancel":
        return cancel_by_user(conversation, call_id, now), seen
    return conversation, seen


@dataclass(frozen=True, slots=True)
class AfterResult:
    """The verdict once the call has its result: the message whose calls it answers
    (``source``), whether the agent follows them up, and how the task (``task_id``)
    ends (``result``: the call's first result, which its section's summary is made
    from, unless cancelled)."""

    source: Message
    follow_up: bool
    ended: Ended
    error: str | None = None
    result: ToolResult | None = None


def after_result(
    conversation: Conversation, call_id: str, message: Message, task_id: str
) -> AfterResult:
    """How the agent goes on and the task ends, now that ``call_id`` (made in
    ``message``) has its result in ``conversation``."""
    stored = find_call(conversation, call_id)
    source = stored[0] if stored else message
    follow_up = wants_follow_up(conversation, source)
    if stored is not None and stored[1].status == "cancelled":
        return AfterResult(source, follow_up, "cancelled")
    state = (conversation.tasks or {}).get(task_id)
    if state is not None and state.status == "cancelled":
        return AfterResult(source, follow_up, "cancelled", state.error or CANCELLED_BY_USER)
    results = [
        p.tool_result
        for m in conversation.messages
        for p in m.content
        if p.tool_result is not None and p.tool_result.tool_call_id == call_id
    ]
    ok = any(r.status == "ok" for r in results)
    return AfterResult(
        source, follow_up, "completed" if ok else "failed", None, results[0] if results else None
    )


Recorded = ToolOutcome | Literal["cancelled"]
"""What a task's tool came to: its outcome, or ``cancelled`` by its user at a step."""


class TaskCalls:
    """The writes a task's delivery makes to its call's conversation, each judged on the
    version it writes (``begin_tool``, ``ask_for_task``): the tasks handler's, through
    ``Agent``."""

    def __init__(self, store: ConversationStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def begin(
        self, user_id: str, conversation_id: str, call_id: str, cancel_requested: bool
    ) -> tuple[Conversation | None, BeforeTool]:
        """``begin_tool`` on the conversation as stored, and its change written in the
        same commit; ``gone`` (and no conversation) when the conversation is."""
        now = self._clock.now()
        begin = partial(begin_tool, call_id=call_id, cancel_requested=cancel_requested, now=now)
        try:
            return await self._store.apply(user_id, conversation_id, begin)
        except NotFound:
            return None, BeforeTool("gone")

    async def ask(self, user_id: str, conversation_id: str, call_id: str, args_json: str) -> None:
        """Put a task's question to its user in a call of its own (``ask_for_task``)."""
        now = self._clock.now()
        await self._store.mutate(
            user_id, conversation_id, lambda c: ask_for_task(c, call_id, args_json, now)
        )

    def result(
        self, call_id: str, outcome: Recorded, task_error: str = TOOL_FAILED
    ) -> Callable[[Conversation], Conversation]:
        """The pure change that gives ``call_id`` its result now (``cancelled``: the
        result the model hears of a user's cancel); ``task_error``: what a failed task's
        section says."""
        now = self._clock.now()
        if isinstance(outcome, str):  # "cancelled"
            return partial(cancel_by_user, tool_call_id=call_id, now=now)
        ok, change = outcome.ok, outcome.change
        return partial(
            record_results,
            outputs={call_id: outcome.output_json},
            status="ok" if ok else "error",
            now=now,
            task_error=None if ok else task_error,
            changes={call_id: change} if change else None,
            descriptions={call_id: outcome.description},
        )
