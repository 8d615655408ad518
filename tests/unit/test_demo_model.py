"""The demo model (the offline model, ``shared/llm/demo.py``): what it recognises, the
calls it makes of the real tools (their own argument models accept them), the words it
answers results with, and the drafts it writes for the task tools (a lesson valid
against the grammar, a plan, a review)."""

from __future__ import annotations

import json

import pytest
import re2

from shared.clock import SystemClock
from shared.lessons.grammar import validate
from shared.llm import demo
from shared.llm.base import ChatMessage, ModelRequest, ToolCallRequest
from shared.llm.demo import EXAMPLES, PREFIX, Turn, respond
from shared.llm.demo_drafts import SAMPLE_NOTE, lesson_xml, plan_json, review_json
from shared.llm.demo_results import QUIZ_ANSWER
from shared.llm.offline import OfflineProvider
from shared.schemas.documents import Lesson
from shared.tools.base import ToolRegistry
from shared.tools.review import parse_feedback
from shared.wiring import drafting_prompt
from tests.unit.helpers import ALICE, Harness, api_of, make_service, serving
from tests.unit.test_tasks import deliver_all, stored

MODEL = "/api/spark/agent/model"
AUTH = {"Authorization": "Bearer alice-token"}
WORK = 'Please check my work, out of 10\n\n[Image attached: "hw.png", 40×30, file "alice/uploads/u1/hw.png"; it is shown below.]'  # noqa: E501
OPEN = "You are Spark AI Agent.\n\nA lesson is open in this conversation (id les_1). The document tools read and edit it."  # noqa: E501


def harness() -> Harness:
    return make_service(OfflineProvider(SystemClock(), token_delay=0))


def turn(text: str, system: str = "You are Spark AI Agent.") -> tuple[Turn, ToolRegistry]:
    tools = harness().deps.tools
    return respond(ModelRequest(system, [ChatMessage("user", text)], tools.specs())), tools


@pytest.mark.parametrize(
    ("text", "tool", "arguments"),
    [
        (
            EXAMPLES[0],
            "create_lesson",
            {"topic": "the water cycle", "audience": "Year 5", "duration_minutes": 30},
        ),
        (EXAMPLES[1], "plan_lessons", {"count": 3, "topic": "fractions", "audience": "Year 4"}),
        ("Plan two lessons about volcanoes", "plan_lessons", {"count": 2, "topic": "volcanoes"}),
        (EXAMPLES[2], "ask_user_question", {}),
        (EXAMPLES[3], "load_skill", {"skill": "fill-blanks"}),
        ("What are the rules for true or false?", "load_skill", {"skill": "true-false"}),
        (EXAMPLES[4], "read_family_messages", {}),
        (EXAMPLES[5], "list_family_members", {}),
        (WORK, "review_work", {"file": "alice/uploads/u1/hw.png", "markOutOf": 10}),
    ],
)
def test_demo_model_turns_a_request_into_the_call_a_model_would_make(
    text: str, tool: str, arguments: dict[str, object]
) -> None:
    made, tools = turn(text)
    (call,) = made.calls
    assert (made.text, call.name) == ("", tool)
    assert arguments.items() <= call.arguments.items()
    # The tool's own argument model accepts the call, as it would a model's.
    tools.parse(ToolCallRequest("c1", call.name, json.dumps(call.arguments)))


def test_demo_model_deletes_the_lesson_open_here_or_says_there_is_none() -> None:
    made, tools = turn(EXAMPLES[6], OPEN)
    assert [(c.name, c.arguments) for c in made.calls] == [("delete_lesson", {"lessonId": "les_1"})]
    tools.parse(ToolCallRequest("c1", "delete_lesson", json.dumps(made.calls[0].arguments)))
    none, _ = turn(EXAMPLES[6])
    assert none.calls == () and "no lesson open here" in none.text


@pytest.mark.parametrize("text", ["What is 2 + 2?", "hello", "Can you check it?"])
def test_demo_model_answers_anything_else_with_what_it_can_show(text: str) -> None:
    made, _ = turn(text)
    assert made.calls == ()
    assert made.text.startswith(PREFIX)
    assert all(f"“{example}”" in made.text for example in EXAMPLES)


def test_demo_model_writes_a_lesson_valid_against_the_grammar_whatever_the_brief() -> None:
    for brief in (
        "Write the lesson.\n\nTopic: the water cycle\nLearners: Year 5\nDuration: 30 minutes",
        'Write the lesson.\n\nTopic: Tom & Jerry <"x">\nLearners: a & b\nDuration: 10 minutes',
        "Write the lesson.\n\nTopic: x\nLearners: y\nDuration: 180 minutes\nThis lesson: A: b",
    ):
        lesson = validate(lesson_xml(brief))
        assert any(n.tag == "exercise" for n in lesson.root.walk())
    assert SAMPLE_NOTE in lesson_xml(EXAMPLES[0])


def test_demo_model_knows_the_drafting_calls_by_their_prompt() -> None:
    lesson = respond(
        ModelRequest(drafting_prompt(), [ChatMessage("user", "Write the lesson.\n\nTopic: tides")])
    )
    assert validate(lesson.text).root.tag == "lesson"
    plan = json.loads(plan_json("Plan a sequence of 4 lessons.\n\nTopic: fractions"))
    assert len(plan["lessons"]) == 4
    marked = parse_feedback(review_json("Review this piece of work.\n\nGive a mark out of 10."), 10)
    assert marked.mark is not None and marked.mark.outOf == 10 and marked.strengths
    assert parse_feedback(review_json("Review this piece of work."), None).mark is None


def after(name: str, output: object, user: str, is_error: bool = False) -> Turn:
    tools = harness().deps.tools
    call = ToolCallRequest("c1", name, "{}")
    messages = [
        ChatMessage("user", user),
        ChatMessage("assistant", tool_calls=(call,)),
        ChatMessage("tool", json.dumps(output), tool_call_id="c1", name=name, is_error=is_error),
    ]
    return respond(ModelRequest("You are Spark AI Agent.", messages, tools.specs()))


def test_demo_model_answers_the_quiz_by_the_answer_chosen() -> None:
    asked = {"answers": [{"question": "…", "answer": [QUIZ_ANSWER]}]}
    assert "that's right" in after("ask_user_question", asked, "Quiz me").text
    wrong = {"answers": [{"question": "…", "answer": ["Evaporation"]}]}
    assert "Not quite" in after("ask_user_question", wrong, "Quiz me").text


def test_demo_model_writes_to_the_member_named_once_it_has_the_members() -> None:
    members = {
        "family": "Okafor",
        "members": [
            {"userId": "u-me", "displayName": "Sam", "role": "child", "you": True},
            {"userId": "u-mum", "displayName": "Mum", "role": "parent"},
            {"userId": "u-dad", "displayName": "Dad", "role": "parent"},
        ],
    }
    made = after("list_family_members", members, EXAMPLES[5])
    assert [(c.name, c.arguments) for c in made.calls] == [
        ("send_family_message", {"to": "u-mum", "text": "I'll be home by six"})
    ]
    nobody = after("list_family_members", members, "Tell Gran hello")
    assert "cannot find Gran" in nobody.text


def test_demo_model_says_what_a_tool_answered() -> None:
    read = {
        "note": "…",
        "messages": [
            {"from": {"displayName": "Dad"}, "text": "<<f quoted>>\nPizza tonight\n<<end f>>"}
        ],
    }
    assert "Dad: “Pizza tonight”" in after("read_family_messages", read, EXAMPLES[4]).text
    failed = after("read_family_messages", "Not in a family.", EXAMPLES[4], is_error=True)
    assert failed.text == PREFIX + 'That did not work: "Not in a family."'


async def lessons_of(service: Harness) -> list[Lesson]:
    ids = [lesson_id for user, lesson_id in service.fakes.lessons._documents if user == "alice"]
    found = [await service.fakes.lessons.get("alice", lesson_id) for lesson_id in ids]
    return [lesson for lesson in found if lesson is not None]


async def test_demo_model_makes_a_lesson_through_the_real_task_tool() -> None:
    service = harness()
    sent = await service.agent.send(ALICE, EXAMPLES[0], None)
    assert sent.run is not None
    await sent.run.execute(lambda frame: None)
    await deliver_all(service, service.fakes.queue)
    conversation = await stored(service, sent.conversation_id)
    (lesson,) = await lessons_of(service)
    validate(lesson.body)
    assert lesson.title == "The water cycle"
    reply = conversation.messages[-1].content[-1].text or ""
    assert reply.startswith(PREFIX + "Your lesson “The water cycle” is ready")


async def test_demo_model_plans_lessons_through_the_real_task_tool() -> None:
    service = harness()
    sent = await service.agent.send(ALICE, EXAMPLES[1], None)
    assert sent.run is not None
    await sent.run.execute(lambda frame: None)
    await deliver_all(service, service.fakes.queue)
    lessons = await lessons_of(service)
    assert len(lessons) == 3 and all(lesson.status == "ready" for lesson in lessons)
    for lesson in lessons:
        validate(lesson.body)
    conversation = await stored(service, sent.conversation_id)
    assert "Your 3 lessons are written" in (conversation.messages[-1].content[-1].text or "")


async def test_the_api_says_the_demo_model_answers_and_what_it_recognises() -> None:
    async with serving(api_of(harness())) as client:
        refused = await client.get(MODEL)
        answered = await client.get(MODEL, headers=AUTH)
    assert refused.status_code == 401
    assert answered.json() == {"model": "offline model", "demo": True, "examples": list(EXAMPLES)}


def test_demo_model_patterns_are_all_linear_time() -> None:
    """A backtracking engine spent 1.2 s of the event loop's CPU on 32 KB of "make "
    (a lazy ``.*?`` tried from each "make"); RE2 matches in time linear in the text."""
    patterns = [v for v in vars(demo).values() if hasattr(v, "search") and hasattr(v, "pattern")]
    assert len(patterns) >= 12
    assert all(isinstance(p, re2._Regexp) for p in patterns), [
        p.pattern for p in patterns if not isinstance(p, re2._Regexp)
    ]


@pytest.mark.parametrize(
    ("text", "tool"),
    [
        ("make " * 6000 + "a lesson about tides", "create_lesson"),
        ("delete " * 6000 + "the lesson", "delete_lesson"),
        ("Tell Zoë I'll be home by six", "list_family_members"),
    ],
)
def test_demo_model_reads_long_and_unicode_messages_as_short_ones(text: str, tool: str) -> None:
    reply, _ = turn(text, OPEN)
    assert [c.name for c in reply.calls] == [tool]


def test_demo_model_takes_tell_me_as_no_message_to_send() -> None:
    reply, _ = turn("Tell me about volcanoes")
    assert reply.calls == ()
