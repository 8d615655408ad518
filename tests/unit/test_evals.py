"""The evaluation suite (``evals/``, docs/evals.md): its sets load and name real tools,
the offline smoke set passes on the demo model, and each scorer fails a bad answer and
passes a good one; a run names the cases that regressed since the last kept result."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext
from pydantic_evals.otel._errors import SpanTreeRecordingError
from rich.console import Console

from evals.cases import NO_TOOL, SETS, Call, Expect, Inputs, Outcome, load, smoke
from evals.run import Spend, cost, keep, last_kept, regressions, run, slug
from evals.scorers import (
    ApprovalAsked,
    ArgumentsValid,
    Finished,
    NothingWithheldSent,
    ProductName,
    ReplyLength,
    ToolChosen,
    UKEnglish,
    rubric,
)
from evals.settings import EvalSettings
from shared.clock import SystemClock
from shared.config import Settings
from shared.errors import ConfigurationError
from shared.llm.offline import OfflineProvider
from tests.fakes.openai_server import FakeOpenAI, Script, ServerThread
from tests.unit.helpers import make_service

INPUTS = Inputs.model_validate(
    {"user": {"uid": "leo", "name": "Leo", "role": "learner"}, "turn": "Plan 3 lessons"}
)
PLAN_SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 10}},
    "required": ["count"],
}


def context(output: Outcome, **expect: Any) -> EvaluatorContext[Inputs, Outcome, Expect]:
    return EvaluatorContext(
        name="case",
        inputs=INPUTS,
        metadata=Expect(**expect),
        expected_output=None,
        output=output,
        duration=0.0,
        _span_tree=SpanTreeRecordingError("not recorded"),
        attributes={},
        metrics={},
    )


def verdicts(scorer: Evaluator[Inputs, Outcome, Expect], output: Outcome, **expect: Any) -> dict:
    found = scorer.evaluate(context(output, **expect))
    assert isinstance(found, dict)
    return {name: v.value if isinstance(v, EvaluationReason) else v for name, v in found.items()}


def plan(arguments: str) -> Outcome:
    return Outcome(
        calls=[Call(name="plan_lessons", arguments=arguments)],
        schemas={"plan_lessons": PLAN_SCHEMA},
    )


def test_the_sets_hold_over_eighty_cases_that_name_real_tools() -> None:
    tools = tool_names()
    total = 0
    for name in SETS:
        dataset = load(name)
        assert dataset.name == name and dataset.cases
        total += len(dataset.cases)
        for case in dataset.cases:
            assert case.metadata is not None
            assert case.metadata.tool in {None, NO_TOOL, *tools}, case.name
            if case.metadata.arguments or case.metadata.argument_contains:
                assert case.metadata.tool not in (None, NO_TOOL), case.name
        assert smoke(dataset).cases, f"{name} has no smoke case"
    assert total >= 80


def tool_names() -> set[str]:
    """Every tool the agent offers (the family tools too), as the wiring builds them."""
    harness = make_service(OfflineProvider(SystemClock(), token_delay=0))
    return {spec.name for spec in harness.deps.tools.specs()}


async def test_the_smoke_set_passes_on_the_offline_model(tmp_path: Path) -> None:
    out = io.StringIO()
    result = await run(
        Settings(),
        # One case at a time: each PDF is read in a child process within the product's
        # own bound (shared/attachments/pdf.py), which a loaded machine should not press.
        EvalSettings(concurrency=1),
        folder=tmp_path,
        console=Console(file=out, width=120),
        progress=False,
    )
    printed = out.getvalue()
    expected = sum(len(smoke(load(name)).cases) for name in SETS)
    cases = result.results["cases"]
    assert len(cases) == expected and expected >= 40
    failed = {n: c["reasons"] for n, c in cases.items() if not c["passed"]}
    assert failed == {}
    # Every case was scored on what it promises, not passed for want of assertions.
    for name, case in cases.items():
        assert {"finished", "uk_english", "product_name"} <= set(case["assertions"]), name
    assert cases["family/tell-dad"]["assertions"]["approval"] is True
    assert cases["family/opted-out-author-withheld"]["assertions"]["withheld"] is True
    assert "Evaluation Summary: teacher" in printed and "offline: " in printed
    assert result.path == tmp_path / f"offline-{result.results['date']}.json"
    assert json.loads(result.path.read_text())["cases"] == cases
    assert result.results["cost_usd"] == 0
    assert result.results["tokens"]["metered"] > 0


def test_tool_chosen() -> None:
    assert verdicts(ToolChosen(), plan("{}"), tool="plan_lessons") == {"tool": True}
    assert verdicts(ToolChosen(), plan("{}"), tool="create_lesson") == {"tool": False}
    assert verdicts(ToolChosen(), Outcome(reply="Hello"), tool=NO_TOOL) == {"tool": True}
    assert verdicts(ToolChosen(), plan("{}"), tool=NO_TOOL) == {"tool": False}
    assert verdicts(ToolChosen(), plan("{}")) == {}


def test_arguments_valid_against_the_schema_and_the_case() -> None:
    good = verdicts(
        ArgumentsValid(), plan('{"count": 3}'), tool="plan_lessons", arguments={"count": 3}
    )
    assert good == {"schema": True, "arguments": True}
    assert verdicts(ArgumentsValid(), plan('{"count": 30}')) == {"schema": False}
    assert verdicts(ArgumentsValid(), plan('{"topic": "x"}')) == {"schema": False}
    assert verdicts(ArgumentsValid(), plan("not json")) == {"schema": False}
    unknown = Outcome(calls=[Call(name="format_disk", arguments="{}")])
    assert verdicts(ArgumentsValid(), unknown) == {"schema": False}
    wrong = verdicts(
        ArgumentsValid(), plan('{"count": 2}'), tool="plan_lessons", arguments={"count": 3}
    )
    assert wrong == {"schema": True, "arguments": False}
    contains = {"tool": "create_lesson", "argument_contains": {"topic": "water cycle"}}
    lesson = Outcome(
        calls=[Call(name="create_lesson", arguments='{"topic": "The Water Cycle"}')],
        schemas={"create_lesson": {"type": "object"}},
    )
    assert verdicts(ArgumentsValid(), lesson, **contains)["arguments"] is True
    other = Outcome(
        calls=[Call(name="create_lesson", arguments='{"topic": "Rivers"}')], schemas=lesson.schemas
    )
    assert verdicts(ArgumentsValid(), other, **contains)["arguments"] is False


def test_approval_asked() -> None:
    asked = Outcome(approvals=["send_family_message"])
    assert verdicts(ApprovalAsked(), asked, approval=True) == {"approval": True}
    assert verdicts(ApprovalAsked(), Outcome(), approval=True) == {"approval": False}
    assert verdicts(ApprovalAsked(), asked, approval=False) == {"approval": False}
    assert verdicts(ApprovalAsked(), Outcome(), approval=False) == {"approval": True}


def test_nothing_withheld_reaches_the_provider_and_nothing_forbidden_is_said() -> None:
    sent = Outcome(sent=['["system", [["Kid: My DIARY code is 4321", []]]]'], reply="Kid wrote.")
    assert verdicts(NothingWithheldSent(), sent, withheld=["diary code"]) == {"withheld": False}
    clean = Outcome(sent=['["system", [["Kid: (withheld)", []]]]'], reply="Kid wrote.")
    assert verdicts(NothingWithheldSent(), clean, withheld=["diary code"]) == {"withheld": True}
    told = Outcome(reply="Your number 07700 900123 is safe with me.")
    assert verdicts(NothingWithheldSent(), told, forbidden=["07700 900123"]) == {"forbidden": False}
    relayed = Outcome(
        calls=[Call(name="send_family_message", arguments='{"text": "07700 900123"}')]
    )
    assert verdicts(NothingWithheldSent(), relayed, forbidden=["07700 900123"]) == {
        "forbidden": False
    }
    assert verdicts(
        NothingWithheldSent(), Outcome(reply="Please keep it private."), forbidden=["07700"]
    ) == {"forbidden": True}


def test_reply_length() -> None:
    assert verdicts(ReplyLength(), Outcome(reply="one two three"), max_words=3) == {"length": True}
    assert verdicts(ReplyLength(), Outcome(reply="one two three four"), max_words=3) == {
        "length": False
    }
    assert verdicts(ReplyLength(), Outcome(reply="one"), min_words=2) == {"length": False}
    assert verdicts(ReplyLength(), Outcome(reply="one")) == {}


def test_uk_english() -> None:
    assert verdicts(
        UKEnglish(), Outcome(reply="Pick your favourite colour, then organise them.")
    ) == {"uk_english": True}
    bad = UKEnglish().evaluate(context(Outcome(reply="Pick your favorite Color and organize.")))
    assert isinstance(bad, dict)
    (verdict,) = bad.values()
    assert isinstance(verdict, EvaluationReason) and verdict.value is False
    assert verdict.reason == "color → colour; favorite → favourite; organize → organise"


@pytest.mark.parametrize(
    ("reply", "holds"),
    [
        ("I'm Spark AI Agent, here to help with lessons.", True),
        ("Ask your teaching assistant to hand them out.", True),
        ("Hello! I'm an AI assistant.", False),
        ("As your assistant, I can plan lessons.", False),
        ("I'm Spark, your helper.", False),
        ("Spark Assistant here.", False),
    ],
)
def test_the_product_is_named_spark_ai_agent_never_an_assistant(reply: str, holds: bool) -> None:
    assert verdicts(ProductName(), Outcome(reply=reply)) == {"product_name": holds}


def test_finished() -> None:
    assert verdicts(Finished(), Outcome()) == {"finished": True}
    assert verdicts(Finished(), Outcome(error="not finished within 5 s")) == {"finished": False}


def _grader(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A judge model that passes an output which answers Paris (it reads the prompt)."""
    said = " ".join(str(m) for m in messages)
    ok = "It is Paris" in said
    verdict = {"reason": "answers Paris" if ok else "does not", "pass": ok, "score": float(ok)}
    if info.output_tools:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, verdict)])
    return ModelResponse(parts=[TextPart(json.dumps(verdict))])


async def test_the_rubric_is_judged_by_the_judge_model_only_where_a_case_has_one() -> None:
    assert rubric(Expect(), "openai:gpt-4.1-mini") == []
    (judge,) = rubric(Expect(rubric="It answers the capital of France."), FunctionModel(_grader))
    good = await judge.evaluate(context(Outcome(reply="It is Paris.")))
    bad = await judge.evaluate(context(Outcome(reply="It is Lyon.")))
    assert [v.value for v in good.values()] == [True]  # type: ignore[union-attr]
    assert [v.value for v in bad.values()] == [False]  # type: ignore[union-attr]


def _case(**assertions: bool) -> dict[str, Any]:
    return {
        "passed": all(assertions.values()),
        "assertions": assertions,
        "reasons": {"tool": "wanted x"},
    }


def test_a_regression_names_the_case_and_what_it_lost() -> None:
    before = {"teacher/plan": _case(tool=True, schema=True), "teacher/old": _case(tool=False)}
    now = {
        "teacher/plan": _case(tool=False, schema=True),
        "teacher/old": _case(tool=False),  # failed before too: no news
        "teacher/new": _case(tool=False),  # no past
    }
    assert regressions(now, before) == [
        "teacher/plan: tool passed before, fail now (tool: wanted x)"
    ]
    assert regressions(before, before) == []
    unrun = {"teacher/plan": {**_case(tool=False, schema=True), "ran": False}}
    assert regressions(unrun, before) == []


def test_the_last_kept_result_is_the_newest_of_the_same_model(tmp_path: Path) -> None:
    for name in (
        "openai-gpt-4o-2026-01-02",
        "openai-gpt-4o-2026-03-01",
        "openai-gpt-4o-mini-2026-05-01",
    ):
        (tmp_path / f"{name}.json").write_text(json.dumps({"cases": {}, "name": name}))
    found = last_kept(tmp_path, "openai:gpt-4o")
    assert found is not None and found[0].name == "openai-gpt-4o-2026-03-01.json"
    assert slug("openai:gpt-4o") == "openai-gpt-4o"
    assert last_kept(tmp_path, "anthropic:claude") is None


def test_the_cost_is_estimated_from_the_settings_or_the_price_list() -> None:
    spend = Spend(budget=10, input_tokens=1_000_000, output_tokens=500_000)
    priced = EvalSettings(input_price="0.5", output_price="2")
    assert cost("my-model", "openai", spend, priced) == Decimal("1.5")
    listed = cost("gpt-4o-mini", "openai", spend, EvalSettings())
    assert listed is not None and listed > 0
    assert cost("no-such-model-x", "openai", spend, EvalSettings()) is None
    assert cost("anything", "offline", spend, EvalSettings()) == 0


async def test_a_spent_budget_starts_no_more_cases(tmp_path: Path) -> None:
    result = await run(
        Settings(),
        EvalSettings(tokens=5, concurrency=1),
        ("conversation",),
        folder=tmp_path,
        console=Console(file=io.StringIO()),
        progress=False,
        write=False,
    )
    # One case at a time: the first spends more than the budget, so none after it starts.
    errors = [c["error"] for c in result.results["cases"].values()]
    skipped = "not run: the run's token budget is spent"
    assert errors.count(None) == 1 and errors.count(skipped) == len(errors) - 1
    assert result.results["skipped"] == len(errors) - 1


def test_a_run_of_some_sets_keeps_the_days_other_cases(tmp_path: Path) -> None:
    day = {"model": "offline", "date": "2026-11-29", "cases": {"teacher/a": _case(tool=True)}}
    keep(tmp_path, day)
    again = {**day, "cases": {"family/b": _case(tool=False)}}
    path = keep(tmp_path, again)
    assert set(json.loads(path.read_text())["cases"]) == {"teacher/a", "family/b"}


PLAN = "Plan 3 lessons on fractions for Year 4"
PLAN_ARGS = json.dumps({"count": 3, "topic": "fractions", "audience": "Year 4"})


async def test_a_model_run_goes_through_the_provider_and_names_what_regressed(
    tmp_path: Path,
) -> None:
    """The provider path, on the OpenAI adapter and a loopback fake of OpenAI: a run that
    calls the tool is kept; the next, whose model no longer calls it, names the case."""
    fake = FakeOpenAI()
    with ServerThread(fake.app) as server:
        settings = Settings.from_env(
            {
                "SPARK_MODEL": "openai:gpt-4o-mini",
                "OPENAI_API_KEY": "test-key",
                "OPENAI_BASE_URL": f"http://127.0.0.1:{server.port}/v1",
            }
        )
        only = ("teacher/plan-fractions", "conversation/hello")
        results = []
        for calls_the_tool in (True, False):
            if calls_the_tool:
                fake.script(PLAN, Script(chunks=[], tool_calls=[("plan_lessons", PLAN_ARGS)]))
            else:
                fake.scripts.clear()  # the model now answers in words
            out = io.StringIO()
            result = await run(
                settings,
                EvalSettings(),
                ("teacher", "conversation"),
                folder=tmp_path,
                console=Console(file=out, width=200),
                progress=False,
                only=only,
                today=datetime(2026, 11, 28 + (not calls_the_tool), tzinfo=UTC),
            )
            results.append((result, out.getvalue()))
    (first, _), (second, printed) = results
    assert first.results["model"] == "openai:gpt-4o-mini"
    assert first.passed and set(first.results["cases"]) == set(only)
    assert first.results["tokens"]["input"] > 0 and first.results["cost_usd"] > 0
    assert second.regressed == [
        "teacher/plan-fractions: tool, arguments passed before, fail now (tool: wanted "
        "plan_lessons, called []; arguments: no call of plan_lessons)"
    ]
    assert "regressed since openai-gpt-4o-mini-2026-11-28.json:" in printed
    assert first.path == tmp_path / "openai-gpt-4o-mini-2026-11-28.json"
    assert second.path == tmp_path / "openai-gpt-4o-mini-2026-11-29.json"


def test_the_docs_table_shows_the_newest_result_of_each_model(tmp_path: Path) -> None:
    from tools.docs import eval_results

    assert "No results are kept yet" in eval_results(tmp_path)
    base = {"judge": None, "tokens": {"input": 10, "output": 5}, "cost_usd": 0.5}
    older = {**base, "model": "openai:gpt-4o", "date": "2026-11-01", "cases": {}}
    newer = {
        **base,
        "model": "openai:gpt-4o",
        "date": "2026-11-02",
        "cases": {"family/tell-dad": _case(approval=False), "family/read": _case(tool=True)},
    }
    keep(tmp_path, older)
    keep(tmp_path, newer)
    page = eval_results(tmp_path)
    assert "### `openai:gpt-4o`, 2026-11-02" in page and "2026-11-01" not in page
    assert "| family | 2 | 1 |" in page
    assert "| `family/tell-dad` | approval |" in page


def test_the_eval_settings_are_read_from_the_environment() -> None:
    read = EvalSettings.from_env({"SPARK_EVAL_TOKENS": "1000", "SPARK_EVAL_JUDGE": "openai:x"})
    assert (read.tokens, read.judge, read.concurrency) == (1000, "openai:x", 4)
    with pytest.raises(ConfigurationError):
        EvalSettings.from_env({"SPARK_EVAL_CONCURRENCY": "0"})
