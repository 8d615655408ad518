"""The agent's service layer driven by Hypothesis across two processes on the Firestore
emulator, checking the invariants of ``shared/audit/`` after every step.

Each "process" has its own Firestore client and stores (so its own remembered
versions), its own agent and task handler, built as ``shared/wiring.py`` builds them,
on a model that answers the commands in the user's message. They share one clock,
which only the test moves, and one task queue, which only the test delivers from: in
any order, more than once, late, to either process. A process may be paused mid-run
(its model or its task tool waits at a gate) and may crash: it stops dead, writing
nothing more, and a fresh one takes its place; what it left is for the watchdogs.

After every step the invariants that hold at any moment are checked, and two that only
the test can see: no model call began once the user's daily tokens were spent, and no
task delivery was acknowledged while the ledger still waited for that attempt to start
(a dropped task). At the end of every example
everything due is delivered (paused work goes on, time moves to each next due task),
time moves past every lease, and the settled invariants are checked as well: nothing
left stuck.

Shrinking is off (``SHRINK``): on this emulator an example takes about a second, and
Hypothesis shrinks for up to five minutes; the failing example is printed unshrunk.
Turn it on to study a failure.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import secrets
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from google.cloud import firestore
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)
from pydantic import BaseModel

from shared import wiring
from shared.audit import Audit, Violation, audit, pending
from shared.auth.base import User
from shared.clock import ManualClock
from shared.config import Settings
from shared.errors import SparkError
from shared.llm.base import Finish, ModelEvent, ModelRequest, TextDelta, ToolCallRequest
from shared.llm.scripted import Step
from shared.policies import limits_of
from shared.queue.base import QueuedTask
from shared.schemas.documents import Lesson, Usage
from shared.schemas.tasks import TASK_PAYLOAD, ToolTask
from shared.store.firestore import FirestoreStores, connect
from shared.tools.base import Tool, ToolContext, ToolRegistry
from shared.tools.people import ask_user_question_tool, delete_lesson_tool
from tests.e2e.conftest import PROJECT
from tools.audit import read_user

pytestmark = pytest.mark.emulator

SETTINGS = replace(
    Settings(),
    project_id=PROJECT,
    throttle_ms=0,  # every event is written at once: no timer between steps
    live_doc_bytes=16_384,  # the smallest budget, so conversations roll over
    history_messages=6,
    runs_per_user=1,
    daily_tokens_per_user=600,  # six model calls
    tasks_per_user=2,
    task_retry_base_ms=2_000,
)
TOKENS_PER_CALL = (60, 40)
USAGE = Usage(input_tokens=TOKENS_PER_CALL[0], output_tokens=TOKENS_PER_CALL[1])
# A paused producer never looks for a stop on its own (it would poll the emulator on
# every tick of the clock); it notices one when it next writes.
NEVER = 10.0**9
RULES_ONLY = ("stale_run", "stale_task")  # judged only once the due tasks were delivered
LESSONS = ("l1", "l2", "l3")
SHRINK = False
RETRY_SECONDS = 1.0  # a delivery refused (busy, or failed) is retried this much later
PAD = " ".join(["Spark AI Agent says more."] * 40)  # ~1 KB: a few turns fill the budget


class Crashed(BaseException):
    """The process died here: nothing after this point of it runs (not an ``Exception``,
    so no handler of ours takes it for a failure to recover from)."""


# -- the model and the task tool --------------------------------------------------------


def _call(name: str, args: dict[str, Any]) -> ToolCallRequest:
    return ToolCallRequest("call", name, json.dumps(args))


QUESTION = {
    "questions": [
        {
            "header": "Level",
            "question": "Which level?",
            "options": [{"label": "Easy"}, {"label": "Hard"}],
        }
    ]
}


def _step(words: list[str]) -> Step:
    """The model's answer to a user message (its first word says what to do)."""
    finish = Finish("tool_calls", USAGE)
    command = words[0] if words else "chat"
    if command == "task":
        return Step([TextDelta("On it."), _call("work", {"hold": False}), finish])
    if command == "slow":
        return Step([TextDelta("On it."), _call("work", {"hold": True}), finish])
    if command == "two":
        work = _call("work", {"hold": False})
        return Step([TextDelta("Both."), work, replace(work, id="call2"), finish])
    if command == "ask":
        return Step([_call("ask_user_question", QUESTION), finish])
    if command == "delete":
        lesson = LESSONS[len(words) % len(LESSONS)]
        return Step([_call("delete_lesson", {"lessonId": lesson}), finish])
    return Step([TextDelta(f"Hello. {PAD}"), Finish("stop", USAGE)])


@dataclass
class CommandModel:
    """Answers the command in the latest user message (``chat``, ``task``, ``slow``,
    ``two``, ``ask``, ``delete``), and a follow-up plainly; ``hold`` in the latest user
    message pauses every model call of that turn until the test releases it."""

    process: Process
    label: str = "scripted"
    provider: ClassVar[str] = "scripted"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        await self.process.world.model_called(self.process)
        users = [m.text for m in request.messages if m.role == "user"]
        if users and "hold" in users[-1].split():
            # Every model call of a held turn waits: its reply, and its follow-ups.
            await self.process.world.gate(self.process, f"model: {users[-1]}")
        if request.messages and request.messages[-1].role == "user":
            step = _step(users[-1].split())
        else:
            step = Step([TextDelta(f"Done. {PAD}"), Finish("stop", USAGE)])
        for event in step.events:
            yield event


class WorkArgs(BaseModel):
    hold: bool = False


def work_tool(process: Process) -> Tool[WorkArgs]:
    async def run(args: WorkArgs, context: ToolContext) -> dict[str, bool]:
        if args.hold:
            await process.world.gate(process, f"task tool {context.tool_call_id}")
        return {"done": True}

    return Tool(
        name="work",
        description="Background work.",
        args=WorkArgs,
        display_text="Working",
        run=run,
        execution="task",
    )


# -- processes: their own client and caches; dead once crashed ----------------------------


class Dead:
    """A store (or the queue) as one process sees it: every call fails once it crashed."""

    def __init__(self, target: Any, process: Process) -> None:
        self._target = target
        self._process = process

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value
        process = self._process
        if inspect.iscoroutinefunction(value):

            async def call(*args: Any, **kwargs: Any) -> Any:
                process.alive()
                process.world.busy += 1
                try:
                    return await value(*args, **kwargs)
                finally:
                    process.world.busy -= 1
                    process.alive()

            return call

        def plain(*args: Any, **kwargs: Any) -> Any:
            process.alive()
            return value(*args, **kwargs)

        return plain


class Process:
    """One instance of the functions: its agent, task handler and people, on its own
    Firestore client (its remembered versions are its own)."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.crashed = False
        self.stores: FirestoreStores = connect(PROJECT)
        conversations = Dead(self.stores.conversations, self)
        ledgers = Dead(self.stores.ledgers, self)
        lessons = Dead(self.stores.lessons, self)
        sections = Dead(self.stores.sections, self)
        tools = ToolRegistry(
            [work_tool(self), ask_user_question_tool(), delete_lesson_tool(lessons)]  # type: ignore[arg-type]
        )
        # The loop's poll never fires: time moves only when the test moves it.
        limits = replace(limits_of(SETTINGS), poll_seconds=NEVER)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(wiring, "limits_of", lambda _: limits)
            components = wiring.assemble(
                SETTINGS,
                conversations,  # type: ignore[arg-type]
                ledgers,  # type: ignore[arg-type]
                lessons,  # type: ignore[arg-type]
                Dead(world.queue, self),  # type: ignore[arg-type]
                CommandModel(self),  # type: ignore[arg-type]
                world.clock,
                ids=world.ids,
                tools=tools,
                system_prompt="You are Spark AI Agent.",
                sections=sections,  # type: ignore[arg-type]
                openings=Dead(self.stores.openings, self),  # type: ignore[arg-type]
                titles=False,  # (no title calls: the model is scripted)
            )
        self.agent = components.agent
        self.scheduler = components.scheduler
        self.ledger = ledgers
        self.handler = components.handler

    def alive(self) -> None:
        if self.crashed:
            raise Crashed(self.name)


# -- the world: clock, queue, paused work ------------------------------------------------


class Queue:
    """Cloud Tasks as the test plays it: a task with a name already taken is dropped."""

    def __init__(self) -> None:
        self.tasks: list[QueuedTask] = []
        self.names: set[str] = set()

    async def enqueue(self, task: QueuedTask) -> None:
        if task.name not in self.names:
            self.names.add(task.name)
            self.tasks.append(task)


@dataclass
class Gate:
    process: Process
    what: str
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    crash: bool = False


@dataclass
class Work:
    """Something a process is doing (a reply, a delivery), possibly paused."""

    process: Process
    task: asyncio.Task[Any]
    delivery: QueuedTask | None = None


class WorldIds:
    """Ids unique in the example (each example has its own user), the same on every run:
    with the clock, the only thing left to vary between runs is the emulator's timing."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter):06d}"


@dataclass
class World:
    uid: str
    clock: ManualClock = field(default_factory=ManualClock)
    ids: WorldIds = field(default_factory=WorldIds)
    queue: Queue = field(default_factory=Queue)
    gates: list[Gate] = field(default_factory=list)
    works: list[Work] = field(default_factory=list)
    busy: int = 0
    draining: bool = False
    findings: list[Violation] = field(default_factory=list)
    retried: dict[str, str] = field(default_factory=dict)  # why each delivery was retried

    async def gate(self, process: Process, what: str) -> None:
        if self.draining:
            return
        gate = Gate(process, what)
        self.gates.append(gate)
        try:
            await gate.opened.wait()
        finally:
            self.gates.remove(gate)
        if gate.crash:
            raise Crashed(process.name)

    async def model_called(self, process: Process) -> None:
        """No model call begins once today's tokens are spent (every way into a model
        call passes the same admission)."""
        ledger = await process.ledger.get(self.uid)
        usage = ledger.usage
        today = self.clock.now().date().isoformat()
        spent = usage.tokens if usage is not None and usage.day == today else 0
        if spent >= SETTINGS.daily_tokens_per_user:
            self.findings.append(
                Violation(
                    "over_budget",
                    self.uid,
                    f"/{self.uid}/server",
                    f"a model call began with {spent} of {SETTINGS.daily_tokens_per_user} "
                    "tokens spent today",
                )
            )


# -- the state machine -------------------------------------------------------------------

processes = st.sampled_from([0, 1])
conversations = st.integers(min_value=0, max_value=2)
COMMANDS = ("chat", "task", "slow", "two", "ask", "delete")


class Agents(RuleBasedStateMachine):
    """Two processes serving one user."""

    loop: ClassVar[asyncio.AbstractEventLoop]
    db: ClassVar[firestore.Client]
    # Exploration: a list here collects every violation instead of failing at the first.
    collect: ClassVar[list[Violation] | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.world = World(uid=f"stateful-{secrets.token_hex(6)}")
        self.conversations: list[str] = []
        self.sent = 0
        self.failed = False  # an invariant broke: the end only cleans up
        self.processes = self.run(self._start())

    async def _start(self) -> list[Process]:
        made = [Process(self.world, "p0"), Process(self.world, "p1")]
        now = self.world.clock.now()
        for lesson_id in LESSONS:
            await made[0].stores.lessons.create(
                self.world.uid,
                Lesson(
                    id=lesson_id,
                    title="A lesson",
                    body="<lesson/>",
                    version=1,
                    created_at=now,
                    updated_at=now,
                ),
            )
        return made

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coroutine)

    # -- doing things, and letting them come to rest ------------------------------------

    async def quiesce(self) -> None:
        """Wait until no store call is under way (paused work stays paused)."""
        world, calm = self.world, 0
        deadline = self.loop.time() + 60
        while calm < 3:
            await asyncio.sleep(0.003)
            calm = calm + 1 if world.busy == 0 else 0
            if self.loop.time() > deadline:
                raise AssertionError("the processes never came to rest")
        self.reap()

    def reap(self) -> None:
        for work in [w for w in self.world.works if w.task.done()]:
            self.world.works.remove(work)
            error = None if work.task.cancelled() else work.task.exception()
            outcome = None if error is not None or work.task.cancelled() else work.task.result()
            if work.delivery is not None and (outcome == "busy" or isinstance(error, SparkError)):
                # Cloud Tasks tries it again after a backoff (the emulator: every 0.1 s).
                later = self.world.clock.now() + timedelta(seconds=RETRY_SECONDS)
                self.world.queue.tasks.append(replace(work.delivery, schedule_at=later))
                self.world.retried[work.delivery.name] = repr(error) if error else "busy"
            if error is not None and not isinstance(error, (Crashed, SparkError)):
                raise error
            if work.delivery is not None and outcome == "done":
                self.acknowledged(work.delivery)

    def acknowledged(self, delivery: QueuedTask) -> None:
        """A tool task's delivery acknowledged while the ledger still waits for that very
        attempt to start was dropped: no other delivery of it is coming."""
        task = TASK_PAYLOAD.validate_json(delivery.body)
        if not isinstance(task, ToolTask):
            return
        ledger = self.db.collection(self.world.uid).document("server").get().to_dict() or {}
        record = (ledger.get("tasks") or {}).get(task.task_id) or {}
        if (
            record.get("status") == "running"
            and record.get("attempt") == task.attempt
            and not record.get("started")
        ):
            self.world.findings.append(
                Violation(
                    "dropped_task",
                    self.world.uid,
                    f"/{self.world.uid}/server",
                    f"the delivery of task {task.task_id} ({record.get('tool')}) attempt "
                    f"{task.attempt} was acknowledged; the ledger still waits for it to start",
                )
            )

    async def start(
        self,
        process: Process,
        job: Callable[[], Awaitable[Any]],
        delivery: QueuedTask | None = None,
    ) -> None:
        task = asyncio.ensure_future(job())
        self.world.works.append(Work(process, task, delivery))
        await self.quiesce()

    def process(self, index: int) -> Process:
        return self.processes[index]

    # -- rules -------------------------------------------------------------------------

    @rule(
        p=processes,
        conversation=conversations,
        command=st.sampled_from(COMMANDS),
        hold=st.booleans(),
        queue=st.booleans(),
        background=st.booleans(),
    )
    def send(
        self, p: int, conversation: int, command: str, hold: bool, queue: bool, background: bool
    ) -> None:
        """A user message, maybe into a busy conversation (409, or queued), maybe 202."""
        process, uid = self.process(p), self.world.uid
        existing = (
            self.conversations[conversation] if conversation < len(self.conversations) else None
        )
        self.sent += 1
        text = f"{command} {'hold ' if hold else ''}#{self.sent}"

        async def job() -> None:
            try:
                sent = await process.agent.send(
                    User(uid=uid),
                    text,
                    existing,
                    background=background,
                    when_busy="queue" if queue else "reject",
                )
            except SparkError:
                return  # refused (busy, limited): nothing changed
            if existing is None:
                self.conversations.append(sent.conversation_id)
            if sent.run is not None:
                await sent.run.execute()

        self.run(self.start(process, job))

    @rule(p=processes, conversation=conversations)
    def stop(self, p: int, conversation: int) -> None:
        if conversation >= len(self.conversations):
            return
        process, cid = self.process(p), self.conversations[conversation]

        async def job() -> None:
            try:
                await process.agent.stop(self.world.uid, cid)
            except SparkError:
                return

        self.run(self.start(process, job))

    def _calls(self, conversation: int, name: str) -> tuple[str, list[str]] | None:
        if conversation >= len(self.conversations):
            return None
        cid = self.conversations[conversation]
        found = read_user(self.db, self.world.uid).conversations.get(cid) or {}
        calls = [
            part["toolCall"]["id"]
            for message in found.get("messages", [])
            for part in message.get("content", [])
            if "toolCall" in part and part["toolCall"]["name"] == name
        ]
        return (cid, calls) if calls else None

    @rule(p=processes, conversation=conversations, pick=st.integers(0, 3), background=st.booleans())
    def answer(self, p: int, conversation: int, pick: int, background: bool) -> None:
        """An answer to a question (perhaps one answered already, or superseded)."""
        found = self._calls(conversation, "ask_user_question")
        if found is None:
            return
        cid, calls = found
        process = self.process(p)

        async def job() -> None:
            try:
                resumed = await process.agent.answer(
                    self.world.uid,
                    cid,
                    calls[-1 - pick % len(calls)],
                    {"0": "Easy"},
                    background=background,
                )
            except SparkError:
                return
            if resumed.run is not None:
                await resumed.run.execute()

        self.run(self.start(process, job))

    @rule(
        p=processes,
        conversation=conversations,
        pick=st.integers(0, 3),
        approve=st.booleans(),
        background=st.booleans(),
    )
    def decide(self, p: int, conversation: int, pick: int, approve: bool, background: bool) -> None:
        """The owner's approval (or denial) of a lesson's deletion."""
        found = self._calls(conversation, "delete_lesson")
        if found is None:
            return
        cid, calls = found
        process = self.process(p)

        async def job() -> None:
            try:
                resumed = await process.agent.decide(
                    self.world.uid,
                    cid,
                    calls[-1 - pick % len(calls)],
                    approved=approve,
                    background=background,
                )
            except SparkError:
                return
            if resumed.run is not None:
                await resumed.run.execute()

        self.run(self.start(process, job))

    @rule(p=processes, pick=st.integers(0, 7), again=st.booleans())
    def deliver(self, p: int, pick: int, again: bool) -> None:
        """One due task, in any order, to either process; ``again`` keeps it queued, to
        be delivered once more (at-least-once delivery)."""
        self.run(self._deliver(self.process(p), pick, again))

    async def _deliver(self, process: Process, pick: int, again: bool) -> bool:
        now = self.world.clock.now()
        due = [t for t in self.world.queue.tasks if t.schedule_at is None or t.schedule_at <= now]
        if not due:
            return False
        chosen = due[pick % len(due)]
        if not again:
            self.world.queue.tasks.remove(chosen)
        payload = TASK_PAYLOAD.validate_json(chosen.body)
        await self.start(process, lambda: process.handler.handle(payload), chosen)
        return True

    @rule(seconds=st.sampled_from([1, 10, 45, 130, 400]))
    def wait(self, seconds: int) -> None:
        """Time passes: leases lapse, retries and watchdogs fall due."""
        self.run(self._advance(seconds))

    async def _advance(self, seconds: float) -> None:
        await self.world.clock.advance(seconds)
        await self.quiesce()

    @rule(index=st.integers(0, 3))
    def release(self, index: int) -> None:
        """A paused model or task tool goes on."""
        if self.world.gates:
            self.world.gates[index % len(self.world.gates)].opened.set()
            self.run(self.quiesce())

    @rule(p=processes)
    def crash(self, p: int) -> None:
        """The process dies where it stands (its paused work with it, unfinished) and a
        fresh one, knowing nothing, takes its place."""
        self.processes[p] = self.run(self._crash(self.process(p)))

    async def _crash(self, process: Process) -> Process:
        process.crashed = True
        for gate in [g for g in self.world.gates if g.process is process]:
            gate.crash = True
            gate.opened.set()
        await self.quiesce()
        for work in [w for w in self.world.works if w.process is process]:
            work.task.cancel()  # waiting on the clock: it would never wake in a dead process
        await self.quiesce()
        process.stores.close()
        return Process(self.world, process.name + "'")

    # -- invariants ----------------------------------------------------------------------

    def check(self, found: list[Violation]) -> None:
        found = [*found, *self.world.findings]
        self.world.findings.clear()
        if self.collect is not None:
            self.collect.extend(found)
            return
        self.failed = self.failed or bool(found)
        assert not found, "\n".join(str(v) for v in found)

    @invariant()
    def consistent(self) -> None:
        """What must hold at any moment (leases aside: their watchdogs may be queued)."""
        documents = read_user(self.db, self.world.uid)
        check = Audit.of(SETTINGS, now=self.world.clock.now())
        self.check([v for v in audit(documents, check) if v.kind not in RULES_ONLY])

    async def _settle(self) -> None:
        """Deliver everything due (moving time on to the next due task) until nothing is
        queued or paused, then move past every lease: what is still live is stuck."""
        world = self.world
        world.draining = True
        for gate in list(world.gates):
            gate.opened.set()
        await self.quiesce()
        for turn in range(400):
            if await self._deliver(self.processes[turn % 2], 0, again=False):
                continue
            if world.works:
                await self._advance(1)
                continue
            waiting = [t.schedule_at for t in world.queue.tasks if t.schedule_at is not None]
            if not waiting:
                break
            await self._advance((min(waiting) - world.clock.now()).total_seconds() + 0.001)
        else:
            left = [f"{t.name} ({world.retried.get(t.name, 'new')})" for t in world.queue.tasks]
            raise AssertionError(
                f"the queue never drained: {', '.join(left)}; {len(world.works)} still at work"
            )
        longest = max(SETTINGS.run_lease_seconds, SETTINGS.task_lease_seconds)
        await self._advance(longest + SETTINGS.watchdog_grace_seconds + 1)
        documents = read_user(self.db, world.uid)
        check = Audit.of(SETTINGS, now=world.clock.now(), settled=True)
        self.check([*pending(documents), *audit(documents, check)])

    def teardown(self) -> None:
        try:
            if not self.failed:
                self.run(self._settle())
        finally:
            for process in self.processes:
                process.stores.close()
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.run(asyncio.sleep(0.01))


def run_agents(db: firestore.Client, examples: int, steps: int, **options: Any) -> None:
    loop = asyncio.new_event_loop()
    Agents.loop, Agents.db = loop, db
    try:
        run_state_machine_as_test(
            Agents,
            settings=settings(
                max_examples=examples,
                stateful_step_count=steps,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                phases=tuple(Phase) if SHRINK else (Phase.explicit, Phase.reuse, Phase.generate),
                **options,
            ),
        )
    finally:
        loop.close()


def test_stateful_two_processes_keep_every_invariant(db: firestore.Client) -> None:
    # Derandomised: every run tries the same programs, on the same ids and clock.
    run_agents(db, examples=50, steps=40, derandomize=True)
