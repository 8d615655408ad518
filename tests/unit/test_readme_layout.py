"""The README's Layout is one true list: each folder once, every path it names there,
every benchmark and tool in it, and every skill named somewhere in the README."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def layout() -> list[str]:
    block = re.search(r"^## Layout\n\n```\n(.*?)^```", README, re.M | re.S)
    assert block is not None
    return block[1].splitlines()


def test_the_layout_lists_each_top_level_entry_once_and_each_exists() -> None:
    entries = [line.split()[0] for line in layout() if line and not line[0].isspace()]
    assert len(entries) == len(set(entries)), [e for e in entries if entries.count(e) > 1]
    for entry in entries:
        assert (ROOT / entry).exists(), entry


def test_the_layout_names_every_benchmark_and_tool() -> None:
    text = "\n".join(layout())
    for folder in ("bench", "tools"):
        for script in sorted((ROOT / folder).glob("*.py")):
            if script.name != "__init__.py":
                assert script.name in text, f"{folder}/{script.name} is not in the Layout"


def test_the_readme_names_every_skill() -> None:
    for skill in sorted((ROOT / "prompts" / "skills").glob("*.md")):
        assert f"`{skill.stem}`" in README, f"the skill {skill.stem} is never mentioned"
