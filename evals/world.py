"""One case played on the real agent, in process: the prompts, tools, loop and egress
as deployed, on the in-package fakes of Firestore, Cloud Storage and Cloud Tasks
(``shared/store/memory``, ``InMemoryTaskQueue``), with the configured model behind the
egress.

``Recording`` sits between the egress and the provider, so what it records is what
left: each request after the screen (the withheld-words scorer reads these), the calls
the model made with the tools' schemas it was offered, and the usage it reported (the
run's cost). The egress's own meter charges each call to the case's user in the ledger,
as in production; ``Outcome.metered_tokens`` is what it counted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from evals.cases import Call, Family, Inputs, Outcome, Page
from shared.agent.stream.events import ApprovalRequiredEvent, QuestionEvent
from shared.agent.stream.transcript import Frame
from shared.attachments.service import Requested
from shared.auth.base import User
from shared.clock import SystemClock
from shared.config import Settings
from shared.families.messages import Target
from shared.llm.base import (
    Finish,
    ModelEvent,
    ModelProvider,
    ModelRequest,
    ProviderName,
    ToolCallRequest,
)
from shared.queue.memory import InMemoryTaskQueue
from shared.schemas.documents import Conversation, Lesson, Message
from shared.schemas.documents.base import FamilyRole
from shared.schemas.documents.parts import ContentPart
from shared.store.files import InMemoryFileStore
from shared.store.memory import (
    InMemoryConversationStore,
    InMemoryFamilyStore,
    InMemoryLessonStore,
    InMemorySettingsStore,
    InMemoryTaskLedgerStore,
)
from shared.wiring import Components, assemble, build_provider
from tests.samples import pdf_with_pages

LESSON_ID = "les_eval"
CONVERSATION_ID = "conv_eval"


def request_text(request: ModelRequest) -> str:
    """All that one request says (its system prompt, every turn's text and every call's
    arguments), as one text to search."""
    turns = [(t.text, [c.arguments for c in t.tool_calls]) for t in request.messages]
    return json.dumps([request.system, turns], ensure_ascii=False)


@dataclass
class Recording:
    """``provider`` with what reached it recorded: the egress hands it each request,
    screened, and it streams back what the provider said."""

    inner: ModelProvider
    requests: list[ModelRequest] = field(default_factory=list)
    calls: list[ToolCallRequest] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def label(self) -> str:
        return self.inner.label

    @property
    def provider(self) -> ProviderName:
        return self.inner.provider

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.requests.append(request)
        async for event in self.inner.stream(request):
            if isinstance(event, ToolCallRequest):
                self.calls.append(event)
            elif isinstance(event, Finish):
                self.input_tokens += event.usage.input_tokens
                self.output_tokens += event.usage.output_tokens
            yield event


def _user(uid: str, name: str) -> User:
    return User(uid=uid, name=name)


async def _family(components: Components, family: Family) -> None:
    """The family made by its first parent, the others invited with their roles and
    joined; its messages delivered as members send them; the opt-outs set."""
    agent = components.agent
    parents = [m for m in family.members if m.role == "parent"]
    if not parents:
        raise ValueError(f"the family {family.name!r} needs a parent to make it")
    founder = parents[0]
    made = await agent.families.create(_user(founder.uid, founder.name), family.name)
    for member in family.members:
        if member is founder:
            continue
        role: FamilyRole = "parent" if member.role == "parent" else "dependent"
        invite = await agent.families.invite(founder.uid, made.id, role)
        await agent.families.join(_user(member.uid, member.name), invite.token)
    for sent in family.messages:
        target = Target(family=True) if sent.to == "family" else Target(user_id=sent.to)
        await agent.delivery.deliver(sent.sender, sent.text, target)
    for uid in family.opted_out:
        await agent.preferences.update(uid, ai_reads_family_messages=False)


async def _attach(files: InMemoryFileStore, uid: str, page: Page) -> Requested:
    """``page`` uploaded as the user's PDF (the tests' own PDF maker: one page of text
    per item, as pypdf reads it back)."""
    data = pdf_with_pages(*page.pages)
    path = f"{uid}/uploads/{page.name}"
    await files.write(path, data, "application/pdf")
    return Requested(path, "application/pdf", len(data))


async def _history(store: InMemoryConversationStore, inputs: Inputs) -> str | None:
    """The conversation so far, stored as the agent would have kept it; its id."""
    if not inputs.history:
        return None
    now = datetime.now(UTC)
    messages = [
        Message(
            id=f"msg_history_{n}",
            role=said.role,
            created_at=now,
            status="complete",
            content=[ContentPart.of_text(said.text)],
        )
        for n, said in enumerate(inputs.history)
    ]
    await store.create(
        inputs.user.uid,
        Conversation(
            id=CONVERSATION_ID,
            participant_ids=[inputs.user.uid],
            created_at=now,
            updated_at=now,
            last_message_at=now,
            messages=messages,
        ),
    )
    return CONVERSATION_ID


def _outcome(recording: Recording, frames: list[Frame], reply: str) -> Outcome:
    schemas = {t.name: t.parameters for r in recording.requests for t in r.tools}
    events = [f.event for f in frames]
    return Outcome(
        calls=[Call(name=c.name, arguments=c.arguments) for c in recording.calls],
        schemas=schemas,
        approvals=[e.tool for e in events if isinstance(e, ApprovalRequiredEvent)],
        questions=sum(isinstance(e, QuestionEvent) for e in events),
        reply=reply,
        sent=[request_text(r) for r in recording.requests],
        input_tokens=recording.input_tokens,
        output_tokens=recording.output_tokens,
    )


async def play(inputs: Inputs, settings: Settings, seconds: float) -> Outcome:
    """``inputs``' turn sent to a fresh agent on ``settings``' model; what it did, within
    ``seconds`` (past them, what it had done, with the error saying so)."""
    clock = SystemClock()
    # The demo model types as a person would see it typed: no pause between words here.
    recording = Recording(build_provider(replace(settings, offline_token_delay_ms=0), clock))
    store, ledger, lessons = (
        InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        InMemoryLessonStore(),
    )
    files = InMemoryFileStore()
    components = assemble(
        settings,
        store,
        ledger,
        lessons,
        InMemoryTaskQueue(),
        recording,
        clock,
        files=files,
        families=InMemoryFamilyStore(),
        settings_store=InMemorySettingsStore(),
    )
    frames: list[Frame] = []
    reply = ""
    error: str | None = None
    user = _user(inputs.user.uid, inputs.user.name)
    try:
        async with asyncio.timeout(seconds):
            if inputs.family is not None:
                await _family(components, inputs.family)
            if inputs.lesson is not None:
                now = datetime.now(UTC)
                lesson = Lesson(
                    id=LESSON_ID,
                    title=inputs.lesson.title,
                    body=inputs.lesson.body,
                    version=1,
                    created_at=now,
                    updated_at=now,
                )
                await lessons.create(user.uid, lesson)
            attached = (
                [await _attach(files, user.uid, inputs.attachment)] if inputs.attachment else []
            )
            sent = await components.agent.send(
                user,
                inputs.turn,
                await _history(store, inputs),
                document_id=LESSON_ID if inputs.lesson is not None else None,
                attachments=attached,
            )
            if sent.run is None:
                raise RuntimeError("the turn opened no run")
            await sent.run.execute(frames.append)
            reply = sent.run.transcript.message().text
            await components.agent.drain()
    except TimeoutError:
        error = f"not finished within {seconds:g} s"
    except Exception as exc:  # a case that breaks is reported, the run goes on
        error = f"{type(exc).__name__}: {exc}"
    outcome = _outcome(recording, frames, reply)
    outcome.error = error
    usage = (await ledger.get(user.uid)).usage
    outcome.metered_tokens = 0 if usage is None else usage.tokens
    return outcome
