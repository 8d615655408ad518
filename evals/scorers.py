"""The scorers: Pydantic Evals evaluators over what the agent did (``Outcome``) against
what the case expects (its metadata, ``Expect``).

Each deterministic scorer judges only the fields a case sets (an empty mapping says
nothing), so the report's assertions are exactly the case's promises; the house rules
(UK English, the product's name) hold of every reply. ``rubric`` adds a judge model's
verdict (Pydantic Evals' ``LLMJudge``), only when one is configured.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from pydantic_ai.models import Model
from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext, LLMJudge

from evals.cases import NO_TOOL, Expect, Inputs, Outcome

Context = EvaluatorContext[Inputs, Outcome, Expect]
Verdicts = Mapping[str, bool | EvaluationReason]


def _expect(ctx: Context) -> Expect:
    return ctx.metadata if ctx.metadata is not None else Expect()


def _verdict(failures: list[str], passed: str) -> EvaluationReason:
    return EvaluationReason(not failures, "; ".join(failures) if failures else passed)


@dataclass
class ToolChosen(Evaluator[Inputs, Outcome, Expect]):
    """The model called the expected tool (``none``: no tool at all)."""

    def evaluate(self, ctx: Context) -> Verdicts:
        wanted = _expect(ctx).tool
        if wanted is None:
            return {}
        called = [c.name for c in ctx.output.calls]
        if wanted == NO_TOOL:
            return {"tool": EvaluationReason(not called, f"called {called}" if called else "none")}
        return {"tool": EvaluationReason(wanted in called, f"wanted {wanted}, called {called}")}


def _arguments(arguments: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


@dataclass
class ArgumentsValid(Evaluator[Inputs, Outcome, Expect]):
    """Every call's arguments are valid against the JSON Schema the tool was offered
    with (``shared/tools/``: each tool's pydantic model's schema), and the expected
    tool's carry the values and words the case names."""

    def evaluate(self, ctx: Context) -> Verdicts:
        expect, outcome = _expect(ctx), ctx.output
        verdicts: dict[str, bool | EvaluationReason] = {}
        if outcome.calls:
            failures = []
            for call in outcome.calls:
                parsed = _arguments(call.arguments)
                schema = outcome.schemas.get(call.name)
                if parsed is None:
                    failures.append(f"{call.name}: arguments are not a JSON object")
                elif schema is None:
                    failures.append(f"{call.name}: no such tool was offered")
                else:
                    error = jsonschema.exceptions.best_match(
                        jsonschema.Draft202012Validator(schema).iter_errors(parsed)
                    )
                    if error is not None:
                        failures.append(f"{call.name}: {error.message}")
            verdicts["schema"] = _verdict(failures, "every call's arguments are valid")
        if expect.arguments or expect.argument_contains:
            verdicts["arguments"] = _verdict(_constraints(expect, outcome), "as the case asks")
        return verdicts


def _constraints(expect: Expect, outcome: Outcome) -> list[str]:
    """What the expected tool's call lacks of the case's argument constraints."""
    calls = [c for c in outcome.calls if c.name == expect.tool]
    if not calls:
        return [f"no call of {expect.tool}"]
    best: list[str] | None = None
    for call in calls:
        parsed = _arguments(call.arguments) or {}
        failures = [
            f"{key} is {parsed.get(key)!r}, not {value!r}"
            for key, value in expect.arguments.items()
            if parsed.get(key) != value
        ]
        failures += [
            f"{key} does not contain {words!r}"
            for key, words in expect.argument_contains.items()
            if words.lower() not in json.dumps(parsed.get(key, ""), ensure_ascii=False).lower()
        ]
        if best is None or len(failures) < len(best):
            best = failures
    return best or []


@dataclass
class ApprovalAsked(Evaluator[Inputs, Outcome, Expect]):
    """A call that needs the user's approval waited for it (and one that needs none did
    not ask)."""

    def evaluate(self, ctx: Context) -> Verdicts:
        wanted = _expect(ctx).approval
        if wanted is None:
            return {}
        asked = ctx.output.approvals
        if wanted:
            return {
                "approval": EvaluationReason(bool(asked), f"asked for {asked}" if asked else "none")
            }
        return {"approval": EvaluationReason(not asked, f"asked for {asked}" if asked else "none")}


def _found(words: list[str], texts: list[str]) -> list[str]:
    """Which of ``words`` occur in any of ``texts`` (any case)."""
    folded = [t.casefold() for t in texts]
    return [w for w in words if any(w.casefold() in t for t in folded)]


@dataclass
class NothingWithheldSent(Evaluator[Inputs, Outcome, Expect]):
    """No withheld word reached the provider (every request recorded past the egress),
    and no forbidden word is in the reply or in any call's arguments."""

    def evaluate(self, ctx: Context) -> Verdicts:
        expect, outcome = _expect(ctx), ctx.output
        verdicts: dict[str, bool | EvaluationReason] = {}
        if expect.withheld:
            leaked = _found(expect.withheld, outcome.sent)
            verdicts["withheld"] = _verdict(
                [f"sent to the provider: {leaked}"] if leaked else [],
                f"none of {len(expect.withheld)} withheld words sent",
            )
        if expect.forbidden:
            said = [outcome.reply, *(c.arguments for c in outcome.calls)]
            found = _found(expect.forbidden, said)
            verdicts["forbidden"] = _verdict([f"said: {found}"] if found else [], "none said")
        return verdicts


def words(text: str) -> int:
    return len(text.split())


@dataclass
class ReplyLength(Evaluator[Inputs, Outcome, Expect]):
    """The reply's length in words is within the case's bounds."""

    def evaluate(self, ctx: Context) -> Verdicts:
        expect = _expect(ctx)
        if expect.min_words is None and expect.max_words is None:
            return {}
        count = words(ctx.output.reply)
        low = expect.min_words or 0
        high = expect.max_words if expect.max_words is not None else count
        return {"length": EvaluationReason(low <= count <= high, f"{count} words")}


US_TO_UK = {
    "color": "colour",
    "colors": "colours",
    "favorite": "favourite",
    "favorites": "favourites",
    "behavior": "behaviour",
    "behaviors": "behaviours",
    "center": "centre",
    "centers": "centres",
    "organize": "organise",
    "organized": "organised",
    "organizing": "organising",
    "organization": "organisation",
    "recognize": "recognise",
    "recognized": "recognised",
    "realize": "realise",
    "realized": "realised",
    "summarize": "summarise",
    "summarized": "summarised",
    "practicing": "practising",
    "analyze": "analyse",
    "analyzed": "analysed",
    "apologize": "apologise",
    "emphasize": "emphasise",
    "memorize": "memorise",
    "categorize": "categorise",
    "personalize": "personalise",
    "customize": "customise",
    "prioritize": "prioritise",
    "honor": "honour",
    "labor": "labour",
    "neighbor": "neighbour",
    "neighbors": "neighbours",
    "humor": "humour",
    "flavor": "flavour",
    "theater": "theatre",
    "meter": "metre",
    "meters": "metres",
    "liter": "litre",
    "liters": "litres",
    "fiber": "fibre",
    "gray": "grey",
    "mom": "mum",
    "math": "maths",
    "catalog": "catalogue",
    "dialog": "dialogue",
    "traveling": "travelling",
    "traveled": "travelled",
    "canceled": "cancelled",
    "modeling": "modelling",
    "labeled": "labelled",
    "defense": "defence",
    "offense": "offence",
    "license": "licence",
    "program": "programme",
    "fulfill": "fulfil",
    "enroll": "enrol",
    "aluminum": "aluminium",
    "pediatric": "paediatric",
    "encyclopedia": "encyclopaedia",
}
"""A small list of US spellings and their UK forms; the reply must use the UK ones.
("program" is left to computing by the context in UK English too, so a case about
code may need a different rule; none does yet.)"""

_US = re.compile(r"\b(" + "|".join(sorted(US_TO_UK, key=len, reverse=True)) + r")\b", re.I)


@dataclass
class UKEnglish(Evaluator[Inputs, Outcome, Expect]):
    """The reply spells words the UK way (``US_TO_UK``)."""

    def evaluate(self, ctx: Context) -> Verdicts:
        found = sorted({m.group(1).lower() for m in _US.finditer(ctx.output.reply)})
        fixes = [f"{w} → {US_TO_UK[w]}" for w in found]
        return {"uk_english": _verdict(fixes, "UK spelling")}


# Speaking of itself as an assistant ("I'm an AI assistant", "as your assistant", "this
# assistant"); a teaching assistant, a person, is no self-reference.
_ASSISTANT = re.compile(
    r"\b(?:I\s*(?:am|'m|’m)|as|this|your)\s+(?:(?:an?|the|your)\s+)?"
    r"(?:(?:AI|virtual|helpful|digital|friendly)\s+)?assistant\b",
    re.I,
)
_SPARK = re.compile(r"\bSpark\b(?!\s+AI\s+Agent\b)")


@dataclass
class ProductName(Evaluator[Inputs, Outcome, Expect]):
    """The reply never calls the product an assistant, and names it "Spark AI Agent"
    whenever it names itself."""

    def evaluate(self, ctx: Context) -> Verdicts:
        reply = ctx.output.reply
        failures = [f"calls itself {m.group(0)!r}" for m in _ASSISTANT.finditer(reply)]
        failures += [
            f"names itself {reply[m.start() : m.start() + 20]!r}" for m in _SPARK.finditer(reply)
        ]
        return {"product_name": _verdict(failures, "Spark AI Agent")}


@dataclass
class Finished(Evaluator[Inputs, Outcome, Expect]):
    """The turn ran to its end (no error, within the case's deadline)."""

    def evaluate(self, ctx: Context) -> Verdicts:
        error = ctx.output.error
        return {"finished": EvaluationReason(error is None, error or "ran to its end")}


DETERMINISTIC: tuple[Evaluator[Inputs, Outcome, Expect], ...] = (
    Finished(),
    ToolChosen(),
    ArgumentsValid(),
    ApprovalAsked(),
    NothingWithheldSent(),
    ReplyLength(),
    UKEnglish(),
    ProductName(),
)
"""Every deterministic scorer, in the order the report shows them."""

JUDGE_PREAMBLE = (
    "You judge one reply of Spark AI Agent, a chat agent for teachers, learners and "
    "families in the UK. The input says who wrote (their role and family), the "
    "conversation so far and their turn; the output is what the agent did (its tool "
    "calls, approvals asked, and the reply's words). Pass it only if: "
)


def rubric(expect: Expect, judge: str | Model) -> list[Evaluator[Inputs, Outcome, Expect]]:
    """The judge model's evaluator of a case's rubric (none without one), with the
    inputs included: age-fitness and Socratic help depend on who asked."""
    if not expect.rubric:
        return []
    judged = LLMJudge(rubric=JUDGE_PREAMBLE + expect.rubric, model=judge, include_input=True)
    return [judged]
