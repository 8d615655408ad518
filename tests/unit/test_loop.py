"""The agent loop on fakes: the model decides, inline tools run inside the stream, bad
calls become error results the model recovers from, steps and outputs are capped."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from shared.agent.prompt.history import build_history
from shared.agent.stream.events import DoneEvent, TextEvent, ToolEndEvent, ToolStartEvent
from shared.llm.base import Finish, ProviderState, TextDelta, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.prompts import DEFAULT_DIR
from shared.schemas.documents import ContentPart, Message, StepState, ToolCall, ToolResult
from shared.tools.base import Tool, ToolContext, ToolRegistry, dump_output
from shared.tools.skills import discover_skills, load_skill_tool
from tests.unit.helpers import ALICE, make_service, run_to_end

SKILLS = DEFAULT_DIR / "skills"


class EchoArgs(BaseModel):
    text: str = Field(description="What to echo.")
    times: int = Field(default=1, ge=1, le=5000)


async def echo(args: EchoArgs, context: ToolContext) -> str:
    return args.text * args.times


def registry() -> ToolRegistry:
    return ToolRegistry(
        [load_skill_tool(SKILLS), Tool("echo", "Echo text.", EchoArgs, "Echoing", echo)]
    )


def call(name: str, args: str, call_id: str = "call_1") -> Step:
    return Step([ToolCallRequest(call_id, name, args), Finish("tool_calls")])


async def test_hello_gets_a_friendly_reply_and_no_tool_call() -> None:
    provider = ScriptedProvider([Step.reply("Hello! How can I help today?")])
    service = make_service(provider, tools=registry())
    conversation_id, events = await run_to_end(service, ALICE, "hello")

    assert {t.name for t in provider.requests[0].tools} == {"load_skill", "echo"}
    assert not any(isinstance(e, ToolStartEvent) for e in events)
    assert events[-1] == DoneEvent(message_id=events[0].assistant_message_id, status="complete")
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    assert [p.type for p in stored.messages[-1].content] == ["text"]


async def test_inline_tool_streams_events_persists_parts_and_the_loop_goes_on() -> None:
    provider = ScriptedProvider(
        [
            Step(
                [
                    TextDelta("Let me check. "),
                    *call("load_skill", '{"skill": "fill-blanks"}').events,
                ]
            ),
            Step.reply("Each blank needs exactly one answer."),
        ]
    )
    service = make_service(provider, tools=registry())
    conversation_id, events = await run_to_end(service, ALICE, "write a fill-blanks exercise")

    start = next(e for e in events if isinstance(e, ToolStartEvent))
    end = next(e for e in events if isinstance(e, ToolEndEvent))
    assert (start.tool, start.args, start.display_text) == (
        "load_skill",
        {"skill": "fill-blanks"},
        "Checking fill-blanks rules",
    )
    assert (end.id, end.status) == (start.id, "success")
    assert events.index(start) < events.index(end)
    assert "".join(e.content for e in events if isinstance(e, TextEvent)) == (
        "Let me check. Each blank needs exactly one answer."
    )
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    reply = stored.messages[-1]
    assert [p.type for p in reply.content] == ["text", "tool_call", "tool_result", "text"]
    tool_call = reply.content[1].tool_call
    assert tool_call is not None and (tool_call.status, tool_call.execution) == (
        "complete",
        "inline",
    )
    result = reply.content[2].tool_result
    assert result is not None and result.status == "ok"
    assert "student-answer" in json.loads(result.output_json)["instructions"]
    # The second step saw the call and its result, paired.
    second = provider.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "tool"]
    assert second[1].tool_calls[0].name == "load_skill"


async def test_unknown_tool_and_invalid_args_become_errors_the_model_recovers_from() -> None:
    provider = ScriptedProvider(
        [
            call("summon_dragon", "{}", "call_a"),
            call("echo", '{"times": "lots"}', "call_b"),
            Step.reply("Sorry, let me answer directly."),
        ]
    )
    service = make_service(provider, tools=registry())
    conversation_id, events = await run_to_end(service, ALICE, "do something")

    ends = [e for e in events if isinstance(e, ToolEndEvent)]
    assert [e.status for e in ends] == ["error", "error"]
    assert ends[0].error is not None and "no tool called 'summon_dragon'" in ends[0].error
    assert ends[1].error is not None and "text" in ends[1].error and "times" in ends[1].error
    assert isinstance(events[-1], DoneEvent) and events[-1].status == "complete"
    tool_turns = [m for m in provider.requests[2].messages if m.role == "tool"]
    assert [t.is_error for t in tool_turns] == [True, True]
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None and stored.messages[-1].status == "complete"


async def test_steps_are_capped_and_the_last_step_offers_no_tools() -> None:
    provider = ScriptedProvider(
        [call("echo", '{"text": "a"}', f"call_{n}") for n in range(2)]
        + [Step.reply("Here is what I found.")]
    )
    service = make_service(provider, tools=registry(), max_steps=3)
    await run_to_end(service, ALICE, "keep going")
    assert [bool(r.tools) for r in provider.requests] == [True, True, False]


async def test_model_that_ignores_the_step_cap_is_stopped_with_a_note() -> None:
    provider = ScriptedProvider([call("echo", '{"text": "a"}', "call_1")] * 2)
    service = make_service(provider, tools=registry(), max_steps=2)
    conversation_id, events = await run_to_end(service, ALICE, "loop")
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    assert "most steps allowed" in stored.messages[-1].text
    assert isinstance(events[-1], DoneEvent)


async def test_long_tool_output_is_capped_with_a_note() -> None:
    provider = ScriptedProvider([call("echo", '{"text": "ab", "times": 3000}'), Step.reply("ok")])
    service = make_service(provider, tools=registry(), tool_output_chars=100)
    conversation_id, _ = await run_to_end(service, ALICE, "echo a lot")
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    result = stored.messages[-1].content[1].tool_result
    assert result is not None
    output = json.loads(result.output_json)
    assert output["truncated"] is True and len(output["content"]) == 100
    assert "narrower" in output["note"] and "6000" in output["note"]


def test_dump_output_keeps_short_results_as_json() -> None:
    assert json.loads(dump_output({"a": 1}, 100)) == {"a": 1}
    assert json.loads(dump_output("short", 100)) == "short"


def test_skills_are_discovered_from_the_folder(tmp_path: Path) -> None:
    (tmp_path / "quiz-writing.md").write_text("---\ndisplay: Reading quiz rules\n---\nBe fair.")
    (tmp_path / "Not A Skill.md").write_text("ignored")
    skills = discover_skills(tmp_path)
    assert list(skills) == ["quiz-writing"]
    assert skills["quiz-writing"].display == "Reading quiz rules"
    assert skills["quiz-writing"].body == "Be fair."
    assert {"fill-blanks", "lesson-planning"} <= set(discover_skills(SKILLS))


async def test_load_skill_names_the_available_skills_when_asked_for_another() -> None:
    provider = ScriptedProvider([call("load_skill", '{"skill": "astrology"}'), Step.reply("ok")])
    service = make_service(provider, tools=registry())
    conversation_id, _ = await run_to_end(service, ALICE, "skill?")
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    result = stored.messages[-1].content[1].tool_result
    assert result is not None and result.status == "error"
    assert "fill-blanks" in json.loads(result.output_json)["error"]


def _message(n: int, role: str, *parts: ContentPart) -> Message:
    return Message.model_validate(
        {
            "id": f"m{n}",
            "role": role,
            "created_at": "2026-01-01T00:00:00Z",
            "status": "complete",
            "content": [p.model_dump() for p in parts],
        }
    )


def test_history_keeps_tool_call_and_result_pairs_intact() -> None:
    call_part = ContentPart(
        type="tool_call",
        tool_call=ToolCall(
            id="c1",
            name="create_lesson",
            args_json="{}",
            display_text="Creating lesson",
            execution="task",
            status="complete",
        ),
    )
    result_part = ContentPart(
        type="tool_result",
        tool_result=ToolResult(tool_call_id="c1", output_json='"done"', status="ok"),
    )
    messages = [
        _message(1, "user", ContentPart.of_text("make a lesson")),
        _message(2, "assistant", call_part),
        _message(3, "user", ContentPart.of_text("and while you wait?")),
        _message(4, "tool", result_part),
        _message(5, "assistant", ContentPart.of_text("It is ready.")),
    ]
    full = build_history(messages, 20)
    assert [m.role for m in full] == ["user", "assistant", "tool", "user", "assistant"]
    assert full[2].text == "done"  # text output reaches the model as itself
    # Cut between the call and its result: the orphaned result is left out.
    cut = build_history(messages, 3)
    assert [m.role for m in cut] == ["user", "assistant"]
    # A call still waiting is answered with a pending note.
    pending = build_history(messages[:3], 20)
    assert [m.role for m in pending] == ["user", "assistant", "tool", "user"]
    assert "still running" in pending[2].text


async def test_provider_state_is_stored_with_its_step_and_sent_back_to_its_provider() -> None:
    signed = ProviderState("scripted", '[{"type": "thinking", "signature": "s1"}]')
    provider = ScriptedProvider(
        [
            Step(
                [
                    TextDelta("Let me check. "),
                    ToolCallRequest("c", "load_skill", '{"skill": "fill-blanks"}'),
                    Finish("tool_calls", state=signed),
                ]
            ),
            Step.reply("Done."),
            Step.reply("Still here."),
        ]
    )
    service = make_service(provider, tools=registry())
    conversation_id, _ = await run_to_end(service, ALICE, "fill the blanks")

    # The next step of the same run sends the state back on the turn that wrote it.
    turns = [m for m in provider.requests[1].messages if m.role == "assistant"]
    assert turns[0].state == signed and turns[0].tool_calls
    stored = await service.store.get("alice", conversation_id)
    assert stored is not None
    reply = stored.messages[-1]
    assert reply.provider_state is not None
    assert [(s.provider, s.step, s.data) for s in reply.provider_state] == [
        ("scripted", 0, signed.data)
    ]
    # So does the next turn of the conversation; a text-only step wrote none.
    await run_to_end(service, ALICE, "and again", conversation_id)
    later = [m for m in provider.requests[2].messages if m.role == "assistant"]
    assert [t.state for t in later] == [signed, None]


def test_history_drops_state_another_provider_wrote() -> None:
    kept = StepState(provider="anthropic", step=0, data='[{"type": "thinking"}]')
    message = Message.model_validate(
        {
            "id": "m1",
            "role": "assistant",
            "created_at": "2026-01-01T00:00:00Z",
            "status": "complete",
            "content": [{"type": "text", "text": "Hello."}],
            "provider_state": [kept.model_dump()],
        }
    )
    (same,) = build_history([message], 20, provider="anthropic")
    assert same.state == ProviderState("anthropic", kept.data)
    (moved,) = build_history([message], 20, provider="google")
    assert moved.state is None and moved.text == "Hello."
