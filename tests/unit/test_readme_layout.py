"""The README stays a short front page, and the docs' Layout is one true list.

The README: at most 200 lines, every relative link it makes resolves, and it points at
the pages a newcomer needs within a click (how to run it, how a reply is streamed and
saved, how to add a tool, how to deploy, what each setting does). The Layout
(docs/layout.md): each folder once, every path it names there, every benchmark and tool
in it; and every skill is named somewhere in the docs.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
LAYOUT = (DOCS / "layout.md").read_text()
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = [link for link in _LINK.findall(README) if "://" not in link]
    assert links
    for link in links:
        assert (ROOT / link).exists(), link


def test_the_readme_leads_to_the_pages_a_newcomer_needs() -> None:
    for page in (
        "docs/getting-started.md",
        "docs/concepts/runs.md",
        "docs/concepts/tools.md",
        "docs/operations/deploy.md",
        "docs/reference/configuration.md",
        "docs/reference/api.md",
    ):
        assert f"]({page})" in README, page


def layout() -> list[str]:
    block = re.search(r"^# Layout\n\n```\n(.*?)^```", LAYOUT, re.M | re.S)
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


def test_the_docs_name_every_skill() -> None:
    docs = "\n".join(page.read_text() for page in sorted(DOCS.rglob("*.md")))
    for skill in sorted((ROOT / "prompts" / "skills").glob("*.md")):
        assert f"`{skill.stem}`" in docs, f"the skill {skill.stem} is never mentioned"
