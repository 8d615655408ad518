"""``load_skill``: the model reads a skill (``prompts/skills/<name>.md``) when it needs it.

Skills are discovered from the folder, so adding a skill is adding a file. A skill
file may start with a front matter block giving its ``description`` (for the model)
and ``display`` (what users see while it is read)::

    ---
    description: Rules for fill-in-the-blanks exercises
    display: Checking fill-blanks rules
    ---

Without ``display``, users see "Checking <name> rules".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, create_model

from shared.errors import ConfigurationError
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
        display=meta.get("display", f"Checking {name} rules"),
        body=text.strip(),
    )


def discover_skills(folder: Path) -> dict[str, Skill]:
    """Every ``*.md`` in ``folder`` whose name is a valid skill name, by name."""
    if not folder.is_dir():
        return {}
    return {
        path.stem: _parse(path) for path in sorted(folder.glob("*.md")) if _NAME.match(path.stem)
    }


def load_skill_tool(folder: Path) -> Tool[Any]:
    """The ``load_skill`` tool over the skills in ``folder`` (read once, at start-up).

    Its one argument, ``skill``, is an ``enum`` of the skills found: the model can only
    name one that exists, and adding a skill is adding a file.

    Raises:
        ConfigurationError: the folder holds no skill.
    """
    skills = discover_skills(folder)
    if not skills:
        raise ConfigurationError(f"No skills found in {folder}.")

    def known(name: str) -> str:
        if name not in skills:
            raise ValueError("choose one of " + ", ".join(skills))
        return name

    # An ``enum`` in the schema however many skills there are (pydantic would write a
    # one-value ``Literal`` as ``const``).
    choice = Annotated[str, AfterValidator(known)]
    args = create_model(
        "LoadSkillArgs",
        __config__=ConfigDict(extra="forbid"),
        skill=(
            choice,
            Field(description="The skill to load.", json_schema_extra={"enum": list(skills)}),
        ),
    )
    listing = "\n".join(f"- {s.name}: {s.description}" for s in skills.values())

    async def run(args: Any, context: ToolContext) -> dict[str, str]:
        skill = skills[args.skill]
        return {"skill": skill.name, "instructions": skill.body}

    def display(args: Any) -> str:
        return skills[args.skill].display

    return Tool(
        name="load_skill",
        description=(
            "Load the detailed rules for a specialised job before doing it: always before "
            "creating or changing an exercise. Only load a skill the request needs. "
            "Skills:\n" + listing
        ),
        args=args,
        display_text=display,
        run=run,
        execution="inline",
    )
