"""A small evaluation of the prompts and tools with a real model (not part of `make test`).

    OPENAI_API_KEY=... python bench/evals/prompts.py [--repeat 3] [--model gpt-4o-mini]

It needs a key (`OPENAI_BASE_URL` is honoured, so any OpenAI-compatible server works)
and runs the real agent (prompts, skills, tools, loop) on in-memory stores, with a
lesson open in the conversation. Each scenario checks what the model *did*:

* "test" and "hello" call no tool;
* "Add a fill-in-the-blank exercise about French verbs" loads the fill-blanks skill
  before it edits, and leaves a valid lesson with a fill-blanks exercise;
* a vague request ("Make it better.") gets a question, not an edit.

It prints each scenario's pass count and exits non-zero if any run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shared.agent.stream.events import QuestionEvent, ToolEndEvent, ToolStartEvent  # noqa: E402
from shared.agent.stream.transcript import Frame  # noqa: E402
from shared.auth.base import User  # noqa: E402
from shared.clock import SystemClock  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.lessons.grammar import InvalidLesson, validate  # noqa: E402
from shared.queue.memory import InMemoryTaskQueue  # noqa: E402
from shared.schemas.documents import Lesson  # noqa: E402
from shared.store.memory import (  # noqa: E402
    InMemoryConversationStore,
    InMemoryLessonStore,
    InMemoryTaskLedgerStore,
)
from shared.wiring import assemble, build_provider  # noqa: E402

USER = User(uid="eval-teacher", name="A teacher")
LESSON = """<lesson>
<h1>French verbs: être and avoir</h1>
<h2>Objectives</h2>
<ul>
<li>Conjugate être and avoir in the present tense.</li>
</ul>
<p>Être (to be) and avoir (to have) are the two most common French verbs.</p>
</lesson>"""


@dataclass
class Outcome:
    tools: list[str]  # tools started, in order (questions included)
    edited: bool
    asked: bool
    text: str
    lesson: str


@dataclass(frozen=True)
class Scenario:
    name: str
    message: str
    check: Callable[[Outcome], str | None]  # why it failed, or None


def no_tool(outcome: Outcome) -> str | None:
    return f"called {outcome.tools}" if outcome.tools else None


def skill_then_edit(outcome: Outcome) -> str | None:
    if "edit_document" not in outcome.tools or not outcome.edited:
        return f"did not edit (tools: {outcome.tools})"
    if "load_skill" not in outcome.tools[: outcome.tools.index("edit_document")]:
        return f"edited before loading the skill (tools: {outcome.tools})"
    try:
        parsed = validate(outcome.lesson)
    except InvalidLesson as exc:
        return f"left an invalid lesson: {exc.message}"
    kinds = [n.attrs.get("type") for n in parsed.root.walk() if n.tag == "exercise"]
    return None if "fill-blanks" in kinds else f"no fill-blanks exercise (found {kinds})"


def asks(outcome: Outcome) -> str | None:
    if outcome.edited:
        return "edited without asking"
    if outcome.asked or outcome.text.rstrip().endswith("?"):
        return None
    return f"did not ask (replied {outcome.text[:80]!r})"


SCENARIOS = [
    Scenario("test: no tool", "test", no_tool),
    Scenario("hello: no tool", "hello", no_tool),
    Scenario(
        "fill-blanks: skill before edit",
        "Add a fill-in-the-blank exercise about French verbs",
        skill_then_edit,
    ),
    Scenario("vague: asks first", "Make it better.", asks),
]


async def run(settings: Settings, scenario: Scenario) -> Outcome:
    clock = SystemClock()
    lessons = InMemoryLessonStore()
    now = datetime.now(UTC)
    await lessons.create(
        USER.uid,
        Lesson(
            id="les_eval",
            title="French verbs",
            body=LESSON,
            version=1,
            created_at=now,
            updated_at=now,
        ),
    )
    components = assemble(
        settings,
        InMemoryConversationStore(),
        InMemoryTaskLedgerStore(),
        lessons,
        InMemoryTaskQueue(),
        build_provider(settings, clock),
        clock,
    )
    sent = await components.agent.send(USER, scenario.message, None, document_id="les_eval")
    assert sent.run is not None
    frames: list[Frame] = []
    await sent.run.execute(frames.append)
    events = [f.event for f in frames]
    tools = [e.tool for e in events if isinstance(e, ToolStartEvent)]
    tools += ["ask_user_question" for e in events if isinstance(e, QuestionEvent)]
    edited = any(isinstance(e, ToolEndEvent) and e.document_id for e in events)
    stored = await lessons.get(USER.uid, "les_eval")
    assert stored is not None
    return Outcome(
        tools,
        edited,
        any(isinstance(e, QuestionEvent) for e in events),
        sent.run.transcript.message().text,
        stored.body,
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    settings = Settings.from_env()
    if args.model:
        settings = replace(settings, model=args.model)
    if settings.offline_model:
        print("No OPENAI_API_KEY (or OPENAI_BASE_URL) set: nothing to evaluate.")
        return 2
    print(f"model: {settings.model}, {args.repeat} run(s) per scenario")
    failed = 0
    for scenario in SCENARIOS:
        passes = 0
        for _ in range(args.repeat):
            outcome = await run(settings, scenario)
            why = scenario.check(outcome)
            passes += why is None
            if why is not None:
                print(f"  {scenario.name}: FAIL: {why}")
        failed += args.repeat - passes
        print(f"{scenario.name}: {passes}/{args.repeat} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
