"""Human in the loop on fakes: questions, approvals and client tools pause a run
durably, and answers, decisions and client results resume it the same way."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from shared.agent.stream.events import (
    ApprovalRequiredEvent,
    DoneEvent,
    QuestionEvent,
    TextEvent,
    ToolStartEvent,
)
from shared.agent.stream.replay import replay
from shared.agent.stream.transcript import Frame
from shared.agent.waiting.whose import person_kind, waiting_on_person
from shared.errors import AlreadyAnswered, NotFound, RequestError, RunInProgress
from shared.llm.base import Finish, ToolCallRequest
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Conversation, Lesson, ToolCall
from shared.schemas.tasks import TASK_PAYLOAD
from shared.tools.base import Tool, ToolContext, ToolRegistry
from shared.tools.people import (
    EditorSelectionArgs,
    ask_user_question_tool,
    delete_lesson_tool,
    get_editor_selection_tool,
)
from tests.unit.helpers import ALICE, Fakes, Harness, make_service, run_frames

NOW = datetime(2026, 1, 1, tzinfo=UTC)
QUESTION = json.dumps(
    {
        "questions": [
            {
                "header": "Year",
                "question": "Which year group is it for?",
                "options": [{"label": "Year 5"}, {"label": "Year 6"}],
            },
            {
                "header": "Parts",
                "question": "Which parts should it cover?",
                "options": [{"label": "Tides"}, {"label": "Moon"}, {"label": "Waves"}],
                "multiSelect": True,
            },
        ]
    }
)


def calls(*pairs: tuple[str, str]) -> Step:
    return Step(
        [
            *(ToolCallRequest(f"p{n}", name, args) for n, (name, args) in enumerate(pairs)),
            Finish("tool_calls"),
        ]
    )


def harness(provider: ScriptedProvider, fakes: Fakes | None = None, **settings: int) -> Harness:
    fakes = fakes or Fakes()
    tools = ToolRegistry(
        [ask_user_question_tool(), get_editor_selection_tool(), delete_lesson_tool(fakes.lessons)]
    )
    return make_service(provider, fakes=fakes, tools=tools, **settings)


async def stored(service: Harness, conversation_id: str) -> Conversation:
    conversation = await service.store.get("alice", conversation_id)
    assert conversation is not None
    return conversation


def waiting_calls(conversation: Conversation) -> list[str]:
    message = conversation.messages[-1]
    return [p.tool_call.id for p in message.content if p.tool_call is not None]


async def test_question_pauses_then_the_answer_resumes_with_a_new_reply() -> None:
    provider = ScriptedProvider(
        [calls(("ask_user_question", QUESTION)), Step.reply("A Year 6 lesson on tides.")]
    )
    service = harness(provider)
    conversation_id, frames = await run_frames(service, ALICE, "plan me a lesson")

    assert [f.event.type for f in frames] == ["run_start", "question", "done"]
    question = frames[1].event
    assert isinstance(question, QuestionEvent) and len(question.questions) == 2
    assert frames[-1].event == DoneEvent(frames[0].event.assistant_message_id, "waiting")  # type: ignore[union-attr]
    paused = await stored(service, conversation_id)
    message = paused.messages[-1]
    (call,) = [p.tool_call for p in message.content if p.tool_call]
    assert (message.status, call.status, call.execution) == ("waiting", "pending", "question")
    assert [t.status for t in (paused.tasks or {}).values()] == ["waiting_on_user"]
    assert paused.active_run is None
    # A reload (or another instance) rebuilds the same events from the document.
    assert replay(message, conversation_id, None)[1:] == frames[1:]

    resumed = await service.agent.answer(
        "alice", conversation_id, call.id, {"0": "Year 6", "1": ["Tides", "Moon"]}, background=False
    )
    assert resumed.status == "accepted" and resumed.run is not None
    follow: list[Frame] = []
    await resumed.run.execute(follow.append)

    after = await stored(service, conversation_id)
    assert [m.role for m in after.messages] == ["user", "assistant", "tool", "assistant"]
    result = after.messages[2].content[0].tool_result
    assert result is not None and result.hidden is True and result.status == "ok"
    assert json.loads(result.output_json)["answers"][1]["answer"] == ["Tides", "Moon"]
    assert after.messages[-1].text == "A Year 6 lesson on tides."
    assert [t.status for t in (after.tasks or {}).values()] == ["completed"]
    history = provider.requests[-1].messages
    assert [m.role for m in history] == ["user", "assistant", "tool"]


@pytest.mark.parametrize(
    ("answers", "error"),
    [
        ({"0": "Year 9", "1": "Tides"}, RequestError),  # not an option
        ({"0": ["Year 5", "Year 6"], "1": "Tides"}, RequestError),  # one label only
        ({"0": "Year 5"}, RequestError),  # a question left unanswered
        ({"0": "Year 5", "1": "Tides", "2": "Moon"}, RequestError),  # no such question
    ],
)
async def test_bad_answers_are_refused_and_change_nothing(
    answers: dict[str, str | list[str]], error: type[Exception]
) -> None:
    service = harness(ScriptedProvider([calls(("ask_user_question", QUESTION))]))
    conversation_id, _ = await run_frames(service, ALICE, "plan")
    (call_id,) = waiting_calls(await stored(service, conversation_id))
    writes = service.store.writes[conversation_id]
    with pytest.raises(error):
        await service.agent.answer("alice", conversation_id, call_id, answers, background=False)
    assert service.store.writes[conversation_id] == writes


async def test_answering_twice_an_unknown_call_or_a_strangers_conversation_is_refused() -> None:
    provider = ScriptedProvider([calls(("ask_user_question", QUESTION)), Step.reply("Ok.")])
    service = harness(provider)
    conversation_id, _ = await run_frames(service, ALICE, "plan")
    (call_id,) = waiting_calls(await stored(service, conversation_id))
    people = service.agent
    good = {"0": "Year 5", "1": "Waves"}
    with pytest.raises(NotFound):
        await people.answer("alice", conversation_id, "call_nope", good, background=False)
    with pytest.raises(NotFound):
        await people.answer("bob", conversation_id, call_id, good, background=False)
    first = await people.answer("alice", conversation_id, call_id, good, background=False)
    assert first.run is not None
    await first.run.execute()
    writes = service.store.writes[conversation_id]
    with pytest.raises(AlreadyAnswered):
        await people.answer("alice", conversation_id, call_id, good, background=False)
    assert service.store.writes[conversation_id] == writes


async def test_answer_without_a_stream_is_produced_by_a_task() -> None:
    fakes = Fakes()
    provider = ScriptedProvider([calls(("ask_user_question", QUESTION)), Step.reply("Done.")])
    service = harness(provider, fakes)
    conversation_id, _ = await run_frames(service, ALICE, "plan")
    (call_id,) = waiting_calls(await stored(service, conversation_id))
    fakes.queue.take()
    resumed = await service.agent.answer(
        "alice", conversation_id, call_id, {"0": "Year 5", "1": "Moon"}, background=True
    )
    assert resumed.status == "accepted" and resumed.run is None
    replies = [t for t in fakes.queue.take() if t.name.startswith("reply-")]
    assert len(replies) == 1
    await service.handler().handle(TASK_PAYLOAD.validate_json(replies[0].body))
    assert (await stored(service, conversation_id)).messages[-1].text == "Done."


async def lesson_harness(
    provider: ScriptedProvider, **settings: int
) -> tuple[Harness, Fakes, str, str]:
    fakes = Fakes()
    await fakes.lessons.create(
        "alice",
        Lesson(
            id="lesson_1",
            title="Tides",
            body="<lesson><h1>Tides</h1></lesson>",
            version=1,
            created_at=NOW,
            updated_at=NOW,
        ),
    )
    service = harness(provider, fakes, **settings)
    conversation_id, frames = await run_frames(service, ALICE, "delete my tides lesson")
    assert [f.event.type for f in frames] == ["run_start", "approval_required", "done"]
    approval = frames[1].event
    assert isinstance(approval, ApprovalRequiredEvent)
    assert approval.args == {"lessonId": "lesson_1"} and approval.tool == "delete_lesson"
    (call_id,) = waiting_calls(await stored(service, conversation_id))
    return service, fakes, conversation_id, call_id


DELETE = ("delete_lesson", '{"lessonId": "lesson_1"}')


async def test_approved_call_runs_once_through_a_task_with_its_stored_arguments() -> None:
    provider = ScriptedProvider([calls(DELETE), Step.reply("Deleted.")])
    service, fakes, conversation_id, call_id = await lesson_harness(provider)
    assert await fakes.lessons.get("alice", "lesson_1") is not None  # nothing ran yet
    fakes.queue.take()

    people = service.agent
    resumed = await people.decide(
        "alice", conversation_id, call_id, approved=True, reason=None, background=False
    )
    assert resumed.status == "accepted" and resumed.run is None
    with pytest.raises(AlreadyAnswered):  # a second decision, before it even ran
        await people.decide(
            "alice", conversation_id, call_id, approved=False, reason="no", background=False
        )
    (task,) = [t for t in fakes.queue.take() if t.name.startswith("task_")]
    handler = service.handler()
    for _ in range(2):  # delivered twice: it runs once
        await handler.handle(TASK_PAYLOAD.validate_json(task.body))

    assert await fakes.lessons.get("alice", "lesson_1") is None
    after = await stored(service, conversation_id)
    (result,) = [p.tool_result for m in after.messages for p in m.content if p.tool_result]
    assert result.status == "ok" and json.loads(result.output_json)["deleted"] == "lesson_1"
    assert after.messages[-1].text == "Deleted."


async def test_a_task_for_a_call_whose_approval_never_landed_does_not_run_it() -> None:
    provider = ScriptedProvider([calls(DELETE), Step.reply("Deleted.")])
    service, fakes, conversation_id, call_id = await lesson_harness(provider)
    fakes.queue.take()
    conversation = await stored(service, conversation_id)
    (call,) = [p.tool_call for p in conversation.messages[-1].content if p.tool_call]
    # The process died between the ledger and the decision: the ledger has a task...
    granted = await service.scheduler.submit(
        "alice", conversation_id, [(call.id, call.name, call.display_text)]
    )
    await service.scheduler.dispatch("alice", granted)
    (task,) = [t for t in fakes.queue.take() if t.name.startswith("task_")]
    await service.handler().handle(TASK_PAYLOAD.validate_json(task.body))
    # ...which must not delete anything the owner did not approve.
    assert await fakes.lessons.get("alice", "lesson_1") is not None
    assert (await stored(service, conversation_id)).messages[-1].status == "waiting"

    # The owner approves later: the task is queued anew and runs.
    await service.agent.decide(
        "alice", conversation_id, call_id, approved=True, reason=None, background=False
    )
    (again,) = [t for t in fakes.queue.take() if t.name.startswith("task_")]
    await service.handler().handle(TASK_PAYLOAD.validate_json(again.body))
    assert await fakes.lessons.get("alice", "lesson_1") is None


async def test_denied_call_never_runs_and_the_model_hears_why() -> None:
    provider = ScriptedProvider([calls(DELETE), Step.reply("I have kept it.")])
    service, fakes, conversation_id, call_id = await lesson_harness(provider)
    resumed = await service.agent.decide(
        "alice",
        conversation_id,
        call_id,
        approved=False,
        reason="I still need it",
        background=False,
    )
    assert resumed.run is not None
    await resumed.run.execute()
    assert await fakes.lessons.get("alice", "lesson_1") is not None
    after = await stored(service, conversation_id)
    call = after.messages[1].content[0].tool_call
    assert call is not None and call.status == "denied"
    tool_turn = provider.requests[-1].messages[-1]
    assert json.loads(tool_turn.text) == {"error": "The user declined: I still need it"}


async def test_approval_endpoints_refuse_the_wrong_kind_of_call() -> None:
    provider = ScriptedProvider([calls(DELETE)])
    service, _, conversation_id, call_id = await lesson_harness(provider)
    with pytest.raises(RequestError):
        await service.agent.answer("alice", conversation_id, call_id, {"0": "x"}, background=False)
    with pytest.raises(RequestError):
        await service.agent.submit_result(
            "alice", conversation_id, call_id, {}, ok=True, background=False
        )


async def test_client_tool_result_resumes_and_an_unanswered_one_times_out() -> None:
    fakes = Fakes()
    provider = ScriptedProvider(
        [
            calls(("get_editor_selection", "{}")),
            Step.reply("That paragraph is about tides."),
            calls(("get_editor_selection", "{}")),
            Step.reply("I could not read your selection."),
        ]
    )
    service = harness(provider, fakes, client_tool_timeout_seconds=1)
    conversation_id, frames = await run_frames(service, ALICE, "explain this")
    assert [f.event.type for f in frames] == ["run_start", "tool_start", "done"]
    start = frames[1].event
    assert isinstance(start, ToolStartEvent) and start.execution == "client"
    (call_id,) = waiting_calls(await stored(service, conversation_id))
    expiries = [t for t in fakes.queue.take() if t.name.startswith("expire-")]
    assert len(expiries) == 1 and expiries[0].schedule_at is not None

    output = {"text": "Tides rise twice a day.", "documentId": "lesson_1"}
    resumed = await service.agent.submit_result(
        "alice", conversation_id, call_id, output, ok=True, background=False
    )
    assert resumed.run is not None
    await resumed.run.execute()
    # Its timeout comes later and changes nothing.
    handler = service.handler()
    await handler.handle(TASK_PAYLOAD.validate_json(expiries[0].body))
    after = await stored(service, conversation_id)
    assert after.messages[-1].text == "That paragraph is about tides."

    _, _ = await run_frames(service, ALICE, "and this?", conversation_id)
    (late,) = [t for t in fakes.queue.take() if t.name.startswith("expire-")]
    await asyncio.sleep(1)
    await handler.handle(TASK_PAYLOAD.validate_json(late.body))
    final = await stored(service, conversation_id)
    assert final.messages[-1].text == "I could not read your selection."
    timed_out = final.messages[-2].content[0].tool_result
    assert timed_out is not None and timed_out.status == "error"
    assert "did not answer within 1 seconds" in timed_out.output_json


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
async def test_two_pending_calls_answered_in_either_order_resume_once(
    order: tuple[int, int],
) -> None:
    provider = ScriptedProvider(
        [
            calls(("ask_user_question", QUESTION), ("get_editor_selection", "{}")),
            Step.reply("Both in hand."),
        ]
    )
    service = harness(provider)
    conversation_id, frames = await run_frames(service, ALICE, "plan from this")
    assert [f.event.type for f in frames] == ["run_start", "question", "tool_start", "done"]
    ids = waiting_calls(await stored(service, conversation_id))
    people = service.agent

    async def give(index: int):  # type: ignore[no-untyped-def]
        if index == 0:
            return await people.answer(
                "alice", conversation_id, ids[0], {"0": "Year 5", "1": "Moon"}, background=False
            )
        return await people.submit_result(
            "alice", conversation_id, ids[1], "some text", ok=True, background=False
        )

    first = await give(order[0])
    assert first.status == "recorded" and first.run is None
    second = await give(order[1])
    assert second.run is not None
    await second.run.execute()
    after = await stored(service, conversation_id)
    assert after.messages[-1].text == "Both in hand."


async def test_a_new_message_supersedes_pending_calls_and_history_stays_whole() -> None:
    provider = ScriptedProvider(
        [calls(("ask_user_question", QUESTION)), Step.reply("Fine, something else then.")]
    )
    service = harness(provider)
    conversation_id, _ = await run_frames(service, ALICE, "plan")
    (call_id,) = waiting_calls(await stored(service, conversation_id))
    _, frames = await run_frames(service, ALICE, "never mind, do something else", conversation_id)
    assert isinstance(frames[-1].event, DoneEvent)
    after = await stored(service, conversation_id)
    (result,) = [p.tool_result for m in after.messages for p in m.content if p.tool_result]
    assert result.tool_call_id == call_id and result.status == "error"
    assert "Superseded" in result.output_json
    # The model saw the call answered (not pending) before the new message.
    history = provider.requests[-1].messages
    assert [m.role for m in history] == ["user", "assistant", "tool", "user"]
    assert "Superseded" in history[2].text
    with pytest.raises(AlreadyAnswered):
        await service.agent.answer(
            "alice", conversation_id, call_id, {"0": "Year 5", "1": "Moon"}, background=False
        )
    text = "".join(f.event.content for f in frames if isinstance(f.event, TextEvent))
    assert text == "Fine, something else then."


async def test_stop_closes_calls_waiting_on_the_user() -> None:
    provider = ScriptedProvider([calls(("ask_user_question", QUESTION))])
    service = harness(provider)
    conversation_id, _ = await run_frames(service, ALICE, "plan")
    (call_id,) = waiting_calls(await stored(service, conversation_id))
    stopped = await service.agent.stop("alice", conversation_id)
    assert stopped.status == "stopped"
    after = await stored(service, conversation_id)
    (result,) = [p.tool_result for m in after.messages for p in m.content if p.tool_result]
    assert result.tool_call_id == call_id and "stopped" in result.output_json
    with pytest.raises(AlreadyAnswered):
        await service.agent.answer(
            "alice", conversation_id, call_id, {"0": "Year 5", "1": "Moon"}, background=False
        )


async def test_a_result_posted_before_its_call_is_saved_is_told_to_wait() -> None:
    gate = asyncio.Event()

    async def slow(args: EditorSelectionArgs, context: ToolContext) -> str:
        await gate.wait()
        return "done"

    fakes = Fakes()
    slow_tool = Tool("slow", "Takes its time.", EditorSelectionArgs, "Working", slow)
    service = make_service(
        ScriptedProvider(
            [
                Step(
                    [
                        ToolCallRequest("a", "get_editor_selection", "{}"),
                        ToolCallRequest("b", "slow", "{}"),
                        Finish("tool_calls"),
                    ]
                )
            ]
        ),
        fakes=fakes,
        tools=ToolRegistry([get_editor_selection_tool(), slow_tool]),
    )
    run = await service.start(ALICE, "explain this", None)
    frames: list[Frame] = []
    task = asyncio.create_task(run.execute(frames.append))
    while len(frames) < 4:  # noqa: ASYNC110 (frames arrive from the run, no event to await)
        await asyncio.sleep(0.01)
    # run_start, usage, the client call, then the slow tool (running)
    client_call = frames[2].event
    assert isinstance(client_call, ToolStartEvent) and client_call.execution == "client"
    # The client is quick; the call is not in the conversation's messages yet.
    with pytest.raises(RunInProgress):
        await service.agent.submit_result(
            "alice", run.conversation_id, client_call.id, "text", ok=True, background=False
        )
    gate.set()
    await task
    resumed = await service.agent.submit_result(
        "alice", run.conversation_id, client_call.id, "text", ok=True, background=True
    )
    assert resumed.status == "accepted"


async def test_replay_after_an_answer_does_not_ask_again() -> None:
    provider = ScriptedProvider([calls(("ask_user_question", QUESTION)), Step.reply("Ok.")])
    service = harness(provider)
    conversation_id, frames = await run_frames(service, ALICE, "plan")
    (call_id,) = waiting_calls(await stored(service, conversation_id))
    resumed = await service.agent.answer(
        "alice", conversation_id, call_id, {"0": "Year 5", "1": "Moon"}, background=False
    )
    assert resumed.run is not None
    await resumed.run.execute()
    message = (await stored(service, conversation_id)).messages[1]
    replayed = replay(message, conversation_id, None)
    assert [f.event.type for f in replayed] == ["run_start", "tool_start", "done"]
    assert [f.id for f in replayed] == [f.id for f in frames]


async def test_an_approved_call_whose_follow_up_waited_still_gets_its_follow_up() -> None:
    # Found by the stateful test: the task ran the approved call, but another run held
    # the conversation, so its follow-up waited; the retried delivery then found the
    # call complete, took it for "not approved" and cancelled, and no follow-up came.
    provider = ScriptedProvider([calls(DELETE), Step.reply("Meanwhile."), Step.reply("Deleted.")])
    # A follow-up that finds the conversation busy is tried again a third of a lease
    # later: a 1 s lease keeps that short.
    service, fakes, conversation_id, call_id = await lesson_harness(provider, run_lease_seconds=1)
    fakes.queue.take()
    await service.agent.decide(
        "alice", conversation_id, call_id, approved=True, reason=None, background=False
    )
    (task,) = [t for t in fakes.queue.take() if t.name.startswith("task_")]
    busy = await service.agent.send(ALICE, "and meanwhile?", conversation_id)
    assert busy.run is not None  # holds the conversation, not yet run
    handler = service.handler()
    await handler.handle(TASK_PAYLOAD.validate_json(task.body))
    assert await fakes.lessons.get("alice", "lesson_1") is None
    await busy.run.execute()
    await asyncio.sleep(0.4)
    for _ in range(5):  # whatever the queue holds now, delivered in order
        for queued in fakes.queue.take():
            await handler.handle(TASK_PAYLOAD.validate_json(queued.body))
    after = await stored(service, conversation_id)
    assert after.active_run is None
    assert [m.text for m in after.messages if m.role == "assistant"][-1] == "Deleted."


def test_a_call_waits_on_the_person_its_kind_names_until_it_is_answered() -> None:
    def call(execution: str, status: str = "pending", approval: bool | None = None) -> ToolCall:
        return ToolCall.model_validate(
            {
                "id": "c",
                "name": "t",
                "args_json": "{}",
                "display_text": "t",
                "execution": execution,
                "status": status,
                "approval": approval,
            }
        )

    # An approval is the owner's, whoever would run the call; then answers and clients.
    assert person_kind(call("task", "awaiting_approval", approval=True)) == "approval"
    assert person_kind(call("client", "queued", approval=True)) == "approval"
    assert person_kind(call("question")) == "question"
    assert person_kind(call("client")) == "client"
    assert person_kind(call("task")) is None and person_kind(call("inline")) is None
    # It waits while undecided or unanswered; an approved call runs, and waits on nobody.
    assert waiting_on_person(call("task", "awaiting_approval", approval=True))
    assert not waiting_on_person(call("task", "queued", approval=True))
    assert waiting_on_person(call("question")) and not waiting_on_person(call("client", "error"))
    assert not waiting_on_person(call("task"))
