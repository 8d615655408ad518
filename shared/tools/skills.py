"""``load_skill``: the model reads a skill (``prompts/skills/<name>.md``) when it needs it.

Skills are discovered from the folder, so adding a skill is adding a file. A skill
file may start with a front matter block giving its ``description`` (for the model)
and ``display`` (what users see while it is read)::

    ---
    description: Rules for fill-in-the-blanks exercises
    display: Checking fill-blanks rules
    ---
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import ToolError
from shared.tools.base import Tool, ToolContext

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    display: str
    body: str


def _parse(path: Path) -> Skill:
    text = path.read_text(encoding="utf-8")
    meta: dict[str, str] = {}
    if text.startswith("---\n"):
        head, _, text = text[4:].partition("\n---\n")
        for line in head.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                meta[key.strip()] = value.strip()
    name = path.stem
    title = name.replace("-", " ")
    return Skill(
        name=name,
        description=meta.get("description", title),
        display=meta.get("display", f"Reading the {title} skill"),
        body=text.strip(),
    )


def discover_skills(folder: Path) -> dict[str, Skill]:
    """Every ``*.md`` in ``folder`` whose name is a valid skill name, by name."""
    if not folder.is_dir():
        return {}
    return {
        path.stem: _parse(path) for path in sorted(folder.glob("*.md")) if _NAME.match(path.stem)
    }


class LoadSkillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The skill's name, exactly as listed in this tool's description.")


def load_skill_tool(folder: Path) -> Tool[LoadSkillArgs]:
    """The ``load_skill`` tool over the skills in ``folder`` (read once, at start-up)."""
    skills = discover_skills(folder)
    listing = "\n".join(f"- {s.name}: {s.description}" for s in skills.values()) or "(none)"

    async def run(args: LoadSkillArgs, context: ToolContext) -> dict[str, str]:
        skill = skills.get(args.name)
        if skill is None:
            raise ToolError(
                f"There is no skill called {args.name!r}. Available skills: "
                + (", ".join(skills) or "none")
                + "."
            )
        return {"skill": skill.name, "instructions": skill.body}

    def display(args: LoadSkillArgs) -> str:
        skill = skills.get(args.name)
        return skill.display if skill else "Looking for a skill"

    return Tool(
        name="load_skill",
        description=(
            "Load detailed instructions for a specialised job before doing it. "
            "Only load a skill when the user's request needs it. Available skills:\n" + listing
        ),
        args=LoadSkillArgs,
        display_text=display,
        run=run,
        execution="inline",
    )
