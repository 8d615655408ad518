"""A run of the suite: every set against the configured model (or, with no key, the
smoke set on the offline demo model), within the run's token budget, then its results
written to ``results/<model>-<date>.json``, compared with the last kept result of the
same model, and its tokens and estimated cost printed.

A case *regressed* when one of its assertions passed in the last kept result and fails
now (a case that failed before and fails again is no news; one that is new has no past).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic_evals import Case
from pydantic_evals.reporting import EvaluationReport
from rich.console import Console

from evals.cases import SETS, EvalSet, Expect, Inputs, Outcome, load, smoke
from evals.scorers import DETERMINISTIC, rubric
from evals.settings import EvalSettings
from evals.world import play
from shared.config import Settings

RESULTS = Path(__file__).resolve().parent / "results"
OFFLINE = "offline"
"""The results' name for the offline demo model's runs."""
NOT_RUN = "not run: the run's token budget is spent"
"""A case's error when the budget was spent before it started: no verdict on the model."""


def slug(model: str) -> str:
    """A model's name as a file name's start: ``openai:gpt-4o`` → ``openai-gpt-4o``."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", model).strip("-").lower()


@dataclass
class Spend:
    """What the run's cases have used so far, against its budget."""

    budget: int
    input_tokens: int = 0
    output_tokens: int = 0
    metered: int = 0
    skipped: list[str] = field(default_factory=list)

    @property
    def used(self) -> int:
        return max(self.input_tokens + self.output_tokens, self.metered)

    @property
    def left(self) -> int:
        return self.budget - self.used


def _task(settings: Settings, evals: EvalSettings, spend: Spend) -> Any:
    async def respond(inputs: Inputs) -> Outcome:
        if spend.left <= 0:
            spend.skipped.append(inputs.turn)
            return Outcome(error=NOT_RUN)
        # The egress's meter holds the case's user to what is left of the run's budget.
        allowed = replace(settings, daily_tokens_per_user=max(1, spend.left))
        outcome = await play(inputs, allowed, evals.case_seconds)
        spend.input_tokens += outcome.input_tokens
        spend.output_tokens += outcome.output_tokens
        spend.metered += outcome.metered_tokens
        return outcome

    return respond


def scored(dataset: EvalSet, judge: str = "") -> EvalSet:
    """``dataset`` scored by every deterministic scorer, and each case's rubric judged
    by ``judge`` (none: no rubric is judged)."""
    cases = [
        Case(
            name=c.name,
            inputs=c.inputs,
            metadata=c.metadata,
            evaluators=[*c.evaluators, *(rubric(c.metadata or Expect(), judge) if judge else [])],
        )
        for c in dataset.cases
    ]
    return EvalSet(name=dataset.name, cases=cases, evaluators=DETERMINISTIC)


def case_results(report: EvaluationReport[Inputs, Outcome, Expect]) -> dict[str, Any]:
    """Each case's verdicts as the results file keeps them."""
    kept: dict[str, Any] = {}
    for case in report.cases:
        assertions = {n: bool(r.value) for n, r in case.assertions.items()}
        kept[f"{report.name}/{case.name}"] = {
            "passed": all(assertions.values()),
            "assertions": assertions,
            "reasons": {n: r.reason for n, r in case.assertions.items() if r.reason},
            "scores": {n: r.value for n, r in case.scores.items()},
            "tools": [c.name for c in case.output.calls],
            "reply": case.output.reply,
            "error": case.output.error,
            "ran": case.output.error != NOT_RUN,
            "seconds": round(case.task_duration, 3),
        }
    for failure in report.failures:
        kept[f"{report.name}/{failure.name}"] = {
            "passed": False,
            "assertions": {"finished": False},
            "reasons": {"finished": failure.error_message},
            "scores": {},
            "tools": [],
            "reply": "",
            "error": failure.error_message,
            "seconds": 0,
        }
    return kept


def regressions(now: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """Each case that regressed since ``before`` (a results file's ``cases``), named with
    the assertions that passed then and fail now (a case the budget left unrun is none)."""
    named = []
    for name, case in sorted(now.items()):
        past = before.get(name)
        if past is None or not case.get("ran", True):
            continue
        lost = [
            a
            for a, ok in case["assertions"].items()
            if not ok and past.get("assertions", {}).get(a) is True
        ]
        if lost:
            why = "; ".join(f"{a}: {case['reasons'].get(a, 'failed')}" for a in lost)
            named.append(f"{name}: {', '.join(lost)} passed before, fail now ({why})")
    return named


def last_kept(folder: Path, model: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest results file of ``model`` in ``folder``, and what it holds."""
    kept = sorted(folder.glob(f"{slug(model)}-[0-9][0-9][0-9][0-9]-*.json"))
    if not kept:
        return None
    return kept[-1], json.loads(kept[-1].read_text(encoding="utf-8"))


def cost(model: str, provider: str, spend: Spend, evals: EvalSettings) -> Decimal | None:
    """The run's estimated cost in US dollars: the settings' prices per million tokens
    if given, else the price list's for the model (``genai-prices``); ``None`` if
    neither knows it. The offline model costs nothing."""
    if provider == OFFLINE:
        return Decimal(0)
    if evals.input_price and evals.output_price:
        per = Decimal(1_000_000)
        return (
            Decimal(evals.input_price) * spend.input_tokens
            + Decimal(evals.output_price) * spend.output_tokens
        ) / per
    from genai_prices import Usage, calc_price

    try:
        usage = Usage(input_tokens=spend.input_tokens, output_tokens=spend.output_tokens)
        return calc_price(usage, model, provider_id=provider).total_price
    except LookupError:
        return None


@dataclass
class Result:
    """A finished run: its results (as written), the regressions it found, and the
    Pydantic Evals reports, one per set."""

    path: Path | None
    results: dict[str, Any]
    regressed: list[str]
    reports: list[EvaluationReport[Inputs, Outcome, Expect]]

    @property
    def passed(self) -> bool:
        return all(case["passed"] for case in self.results["cases"].values())


async def run(
    settings: Settings,
    evals: EvalSettings,
    names: tuple[str, ...] = SETS,
    *,
    folder: Path = RESULTS,
    console: Console | None = None,
    progress: bool = True,
    write: bool = True,
    today: datetime | None = None,
    only: Collection[str] = (),
) -> Result:
    """Every case of the sets ``names`` (only their smoke cases on the offline model;
    only the cases ``only`` names, ``set/name``, if it names any), its report printed to
    ``console``, its results written to ``folder`` (with ``write``)."""
    console = console or Console()
    offline = settings.offline_model
    model = OFFLINE if offline else f"{settings.provider}:{settings.model}"
    judge = "" if offline else evals.judge
    spend = Spend(evals.tokens)
    task = _task(settings, evals, spend)
    reports = []
    cases: dict[str, Any] = {}
    for name in names:
        dataset = load(name)
        dataset = smoke(dataset) if offline else dataset
        if only:
            chosen = [c for c in dataset.cases if f"{name}/{c.name}" in only]
            dataset = EvalSet(name=name, cases=chosen)
        dataset = scored(dataset, judge)
        report = await dataset.evaluate(
            task, name=name, max_concurrency=evals.concurrency, progress=progress
        )
        report.print(console=console, include_durations=False)
        reports.append(report)
        cases.update(case_results(report))
    day = (today or datetime.now(UTC)).date().isoformat()
    price = cost(settings.model, OFFLINE if offline else settings.provider, spend, evals)
    results: dict[str, Any] = {
        "model": model,
        "date": day,
        "judge": judge or None,
        "tokens": {
            "input": spend.input_tokens,
            "output": spend.output_tokens,
            "metered": spend.metered,
            "budget": evals.tokens,
        },
        "cost_usd": None if price is None else float(price),
        "skipped": len(spend.skipped),
        "cases": cases,
    }
    before = last_kept(folder, model)
    regressed = regressions(cases, before[1]["cases"]) if before else []
    path = keep(folder, results) if write else None
    _summary(console, results, regressed, before[0] if before else None, path)
    return Result(path, results, regressed, reports)


def keep(folder: Path, results: dict[str, Any]) -> Path:
    """``results`` written as ``folder/<model>-<date>.json``: a second run on the same
    day replaces the first's cases, and keeps those it did not run (a run of some sets
    loses none of the others'); the tokens and cost are the last run's."""
    path = folder / f"{slug(results['model'])}-{results['date']}.json"
    folder.mkdir(parents=True, exist_ok=True)
    if path.exists():
        earlier = json.loads(path.read_text(encoding="utf-8"))["cases"]
        results = {**results, "cases": {**earlier, **results["cases"]}}
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return path


def _summary(
    console: Console,
    results: dict[str, Any],
    regressed: list[str],
    before: Path | None,
    path: Path | None,
) -> None:
    cases = results["cases"].values()
    passed = sum(c["passed"] for c in cases)
    tokens = results["tokens"]
    price = results["cost_usd"]
    console.print(f"{results['model']}: {passed} of {len(cases)} cases passed")
    console.print(
        f"tokens: {tokens['input']:,} in, {tokens['output']:,} out "
        f"({tokens['metered']:,} metered, budget {tokens['budget']:,}); "
        + ("cost: unknown (no price for the model)" if price is None else f"cost ≈ ${price:.4f}")
    )
    for name, case in results["cases"].items():
        for assertion, ok in case["assertions"].items():
            if not ok:
                why = case["reasons"].get(assertion, "failed")
                console.print(f"  failed: {name}: {assertion}: {why}", markup=False)
    if results["skipped"]:
        console.print(f"{results['skipped']} cases not run: the token budget was spent")
    if before is None:
        console.print("no earlier result of this model to compare with")
    elif regressed:
        console.print(f"regressed since {before.name}:")
        for line in regressed:
            console.print(f"  {line}", markup=False)
    else:
        console.print(f"no case regressed since {before.name}")
    if path is not None:
        console.print(f"results: {path}")


def main(argv: list[str] | None = None) -> int:
    """``python -m evals [SET ...]``: exit 1 if a case regressed, else 0."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m evals", description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", help=f"the sets (default: all of {', '.join(SETS)})")
    parser.add_argument("--no-write", action="store_true", help="write no results file")
    parser.add_argument(
        "--case", action="append", default=[], help="only this case (set/name; repeatable)"
    )
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    names = tuple(args.sets) or tuple(dict.fromkeys(c.split("/")[0] for c in args.case)) or SETS
    unknown = sorted(set(names) - set(SETS))
    if unknown:
        parser.error(f"no such set: {', '.join(unknown)}")
    if settings.offline_model:
        print("No model key: the offline smoke set, on the demo model, deterministic scorers only.")
    evals = EvalSettings.from_env()
    result = asyncio.run(run(settings, evals, names, write=not args.no_write, only=args.case))
    # Offline, every smoke case must pass (the demo model is deterministic); with a model,
    # quality varies: only a regression fails the run.
    if settings.offline_model:
        return 0 if result.passed else 1
    return 1 if result.regressed else 0
