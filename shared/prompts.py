"""Prompts are files in ``prompts/``; this is their one cached loader."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "prompts"


def prompts_dir() -> Path:
    return Path(os.environ.get("SPARK_PROMPTS_DIR") or DEFAULT_DIR)


@cache
def load_prompt(name: str) -> str:
    """The text of ``prompts/<name>.md``."""
    return (prompts_dir() / f"{name}.md").read_text(encoding="utf-8").strip()
