"""What a run of the evaluation suite is told, from the environment, declared as the
product's own settings are (``shared/config/declaration.setting``) so the docs list them
from the declarations; the model and its key are the product's (``SPARK_MODEL`` and the
provider's key, ``shared/config``). The functions never read these: nothing deploys them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from shared.config.declaration import Setting, read, setting


@dataclass(frozen=True)
class EvalSettings:
    """A run's judge, budget, concurrency and deadline."""

    judge: str = setting(
        "SPARK_EVAL_JUDGE",
        "",
        "the judge model of the cases' rubrics (Pydantic AI's name, e.g. "
        "``openai:gpt-4.1-mini``); unset: no rubric is judged",
        shown="unset",
    )
    tokens: int = setting(
        "SPARK_EVAL_TOKENS",
        400_000,
        "a run's token budget: no case starts once it is spent, and each case's user has "
        "what is left as their day's tokens (the egress's meter refuses calls past it)",
    )
    concurrency: int = setting("SPARK_EVAL_CONCURRENCY", 4, "cases run at once")
    case_seconds: int = setting(
        "SPARK_EVAL_CASE_SECONDS", 120, "each case's deadline, from its set-up to its reply"
    )
    input_price: str = setting(
        "SPARK_EVAL_INPUT_PRICE",
        "",
        "US dollars per million input tokens, for the cost estimate when the price list "
        "(``genai-prices``) does not know the model",
        shown="unset",
    )
    output_price: str = setting(
        "SPARK_EVAL_OUTPUT_PRICE",
        "",
        "US dollars per million output tokens, likewise",
        shown="unset",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EvalSettings:
        env = os.environ if env is None else env
        return cls(**{name: read(env, s, default) for name, (s, default) in DECLARED.items()})


DECLARED: dict[str, tuple[Setting, Any]] = {
    f.name: (f.metadata["setting"], f.default) for f in fields(EvalSettings)
}
"""Each setting's declaration and default, by field."""
