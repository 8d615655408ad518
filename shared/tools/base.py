"""Tools, declared once (DESIGN §5): what the model sees, how they run, what users see.

A ``Tool`` pairs a pydantic model of its arguments (whose JSON Schema is what the
model sees, field descriptions included) with the coroutine that does the work.
``ToolRegistry.parse`` turns the model's raw call into validated arguments, or a
``ToolError`` the model can recover from; nothing the model sends crashes a run.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from shared.errors import ToolError
from shared.llm.base import Meter, ToolCallRequest, ToolSpec
from shared.schemas.documents import Execution

A = TypeVar("A", bound=BaseModel)


async def _no_progress(text: str) -> None:
    """Progress of a call nobody shows (inline calls finish within the stream)."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who and what a tool call is for; tools derive idempotency keys from it.

    ``document_id`` is the lesson the conversation works on, if any. ``progress``
    shows a task's progress ("Creating lesson 2 of 5") on its task entry: each call
    updates the same entry. ``meter`` reserves and settles the tool's own model calls
    against the user's daily tokens (``Egress.complete`` takes it; without one, the
    user's day is metered all the same).
    """

    user_id: str
    conversation_id: str
    tool_call_id: str
    document_id: str | None = None
    progress: Callable[[str], Awaitable[None]] = _no_progress
    meter: Meter | None = None
    # The user's answer to the question this task asked (``ToolOutput.ask``), once given.
    answer: str | None = None


@dataclass(frozen=True, slots=True)
class DocumentChange:
    """A lesson a tool created or changed, at its new version. ``tool_end`` carries it
    so editors refresh, and it becomes the conversation's document."""

    document_id: str
    version: int


@dataclass(frozen=True, slots=True)
class Ask:
    """A question a task tool must have answered before it can go on (e.g. which part of
    an ambiguous piece of work to review), put to the user as an ``ask_user_question``
    call of its own; the task then waits (``waiting_on_user``) and runs again with the
    answer (``ToolContext.answer``)."""

    header: str
    question: str
    options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool gives back: ``value`` for the model, and the lesson it changed; a task
    tool may ``ask`` its user first (``value`` is then what the model reads should the
    question not be put)."""

    value: Any
    change: DocumentChange | None = None
    ask: Ask | None = None


@dataclass(frozen=True, slots=True)
class Checked(Generic[A]):
    """What a tool's ``check`` found before its call runs.

    ``args`` are the arguments to run it with, pinned to what the check read (the
    lesson and its version), so the run applies exactly what was checked or nothing;
    ``approval`` asks the owner first, showing them ``display_text``.
    """

    args: A
    approval: bool = False
    display_text: str | None = None


@dataclass(frozen=True)
class Tool(Generic[A]):
    """One tool.

    Attributes:
        name: what the model calls it.
        description: when to use it, for the model.
        args: the arguments; ``Field(description=...)`` texts reach the model.
        display_text: what users see while it runs ("Creating lesson"), or a
            function of the arguments that says it more precisely.
        run: does the work and returns a JSON-serialisable result (or a
            ``ToolOutput`` naming the lesson it changed); raises
            ``ToolError`` for failures the model should hear about. Any other
            exception is transient: task tools are retried, inline tools report it.
        execution: ``inline`` runs inside the streaming request; ``task`` on Cloud Tasks;
            ``client`` on the user's client, ``question`` is answered by the user (both
            pause the run until their result is posted; ``run`` is never called).
        requires_approval: the owner must approve each call before it runs.
        check: for an ``inline`` tool, looked at before each call the model makes (never
            again when an approved call runs): pins the arguments to what it read, and
            may ask for the owner's approval of this one call (an edit that removes most
            of a lesson). Raises ``ToolError`` as ``run`` does.
        sends: the argument that carries text to other people, judged by the moderator
            for a covered user before their approval is asked (DESIGN §16).
    """

    name: str
    description: str
    args: type[A]
    display_text: str | Callable[[A], str]
    run: Callable[[A, ToolContext], Awaitable[Any]]
    execution: Execution = "inline"
    requires_approval: bool = False
    check: Callable[[A, ToolContext], Awaitable[Checked[A]]] | None = None
    sends: str | None = None

    def spec(self) -> ToolSpec:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(self.name, self.description, schema)

    def display(self, args: BaseModel) -> str:
        if isinstance(self.display_text, str):
            return self.display_text
        return self.display_text(args)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """A model's tool call whose tool exists and whose arguments are valid (and, once
    its tool's ``check`` has looked at it, pinned)."""

    tool: Tool[Any]
    args: BaseModel
    call: ToolCallRequest
    approval: bool = False  # this call needs the owner's approval, whatever its tool
    shown: str | None = None  # what the check said users see instead of the usual text

    @property
    def display_text(self) -> str:
        return self.shown or self.tool.display(self.args)

    @property
    def needs_approval(self) -> bool:
        return self.approval or self.tool.requires_approval

    async def checked(self, context: ToolContext) -> ParsedCall:
        """The call as its tool's ``check`` pins it (itself if the tool has none).

        Raises:
            ToolError: the check refused it.
        """
        if self.tool.check is None:
            return self
        found = await self.tool.check(self.args, context)
        return replace(self, args=found.args, approval=found.approval, shown=found.display_text)

    async def run(self, context: ToolContext) -> ToolOutput:
        result = await self.tool.run(self.args, context)
        return result if isinstance(result, ToolOutput) else ToolOutput(result)


class ToolRegistry:
    """The tools one agent may use, by name."""

    def __init__(self, tools: Iterable[Tool[Any]]) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool
        self._specs = tuple(tool.spec() for tool in self._tools.values())

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def specs(self) -> tuple[ToolSpec, ...]:
        return self._specs

    def parse(self, call: ToolCallRequest) -> ParsedCall:
        """Validate the model's call.

        Raises:
            ToolError: no such tool, or the arguments are not valid; the message
                tells the model how to correct the call.
        """
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise ToolError(f"There is no tool called {call.name!r}. Available tools: {known}.")
        try:
            raw = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolError(f"The arguments for {call.name} are not valid JSON: {exc}.") from None
        if not isinstance(raw, dict):
            raise ToolError(f"The arguments for {call.name} must be a JSON object.")
        try:
            args = tool.args.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolError(f"Invalid arguments for {call.name}: {problems}.") from None
        return ParsedCall(tool, args, call)


def dump_output(value: Any, limit: int) -> str:
    """A tool's result as the JSON text stored and shown to the model, capped at ``limit``
    characters of content so one tool cannot flood the model's context."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) <= limit:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(
        {
            "truncated": True,
            "content": text[:limit],
            "note": (
                f"Output cut at {limit} of {len(text)} characters. "
                "Ask for a narrower part (a section, a search, a smaller range) to see the rest."
            ),
        },
        ensure_ascii=False,
    )


def error_output(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)
