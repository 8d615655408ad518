"""Prompts are files in ``prompts/``; this is their one cached loader."""

from __future__ import annotations

from functools import cache
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "prompts"
"""The prompts packaged with the code (``SPARK_PROMPTS_DIR`` may name another folder)."""


@cache
def load_prompt(name: str, folder: Path = DEFAULT_DIR) -> str:
    """The text of ``<folder>/<name>.md``."""
    return (folder / f"{name}.md").read_text(encoding="utf-8").strip()
