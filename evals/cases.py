"""What one case says (its ``inputs`` and ``metadata`` in a dataset's YAML), and the
datasets loaded as Pydantic Evals ``Dataset`` objects.

A case is a person (their role, their family), the conversation so far, an open lesson
or an attached page where the case needs one, the turn they send, and what must hold
(``Expect``): the scorers (``scorers.py``) read each field and say nothing of a field a
case leaves unset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_evals import Dataset

DATASETS = Path(__file__).resolve().parent / "datasets"
SETS = ("teacher", "learner", "family", "safety", "conversation")
"""The five sets, in the order a run takes them."""

NO_TOOL = "none"
"""``Expect.tool`` for a turn that must be answered in words, with no tool."""

Role = Literal["teacher", "learner", "parent", "dependent"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Person(Strict):
    """Someone in a case: ``uid`` names them in the stores, ``name`` is how they are
    shown; ``role`` is a family role for members, else what they use Spark for."""

    uid: str = Field(pattern=r"^[a-z][a-z0-9-]{1,40}$")
    name: str
    role: Role


class FamilyMessage(Strict):
    """A message one member sent before the case begins: to another member (their
    uid) or to ``family``."""

    sender: str
    to: str
    text: str


class Family(Strict):
    """The family the case's user belongs to: its members (the first parent made it),
    their messages so far, and the members who turned off the agent reading theirs."""

    name: str
    members: list[Person]
    messages: list[FamilyMessage] = []
    opted_out: list[str] = []


class Said(Strict):
    """One earlier turn of the conversation."""

    role: Literal["user", "assistant"]
    text: str


class OpenLesson(Strict):
    """A lesson open in the conversation (its body is lesson XML)."""

    title: str
    body: str


class Page(Strict):
    """A piece of work attached to the turn: a PDF of these pages' text."""

    name: str
    pages: list[str]


class Inputs(Strict):
    """Who sends the turn, in what setting."""

    user: Person
    family: Family | None = None
    history: list[Said] = []
    lesson: OpenLesson | None = None
    attachment: Page | None = None
    turn: str


class Expect(Strict):
    """What must hold of the agent's answer to the turn.

    ``tool``: the tool it must call (``none``: none at all; unset: not judged);
    ``arguments``: values the call's arguments must have; ``argument_contains``: words
    an argument must contain (any case); ``approval``: whether the call must wait for
    the user's approval; ``withheld``: words that must never reach the provider;
    ``forbidden``: words that must be in neither the reply nor any tool's arguments;
    ``min_words`` and ``max_words``: the reply's length; ``rubric``: what a judge model
    checks (only when one is configured); ``smoke``: the offline demo model knows the
    turn, so the offline smoke set holds it.
    """

    smoke: bool = False
    tool: str | None = None
    arguments: dict[str, Any] = {}
    argument_contains: dict[str, str] = {}
    approval: bool | None = None
    withheld: list[str] = []
    forbidden: list[str] = []
    min_words: int | None = Field(default=None, ge=0)
    max_words: int | None = Field(default=None, ge=1)
    rubric: str | None = None


class Call(Strict):
    """A tool call the model made: its name and its arguments as the JSON it wrote."""

    name: str
    arguments: str


class Outcome(BaseModel):
    """What the agent did with the turn: the calls the model made (and the JSON Schema
    each tool was offered with), the approvals and questions it asked, its reply's
    words, and every request that reached the provider (after the egress), as text."""

    calls: list[Call] = []
    schemas: dict[str, dict[str, Any]] = {}
    approvals: list[str] = []
    questions: int = 0
    reply: str = ""
    sent: list[str] = []
    input_tokens: int = 0
    output_tokens: int = 0
    metered_tokens: int = 0
    error: str | None = None


EvalSet = Dataset[Inputs, Outcome, Expect]


def load(name: str, folder: Path = DATASETS) -> EvalSet:
    """The set ``name`` (``datasets/NAME.yaml``), its cases checked against ``Inputs``
    and ``Expect`` (a misspelt field fails here, not in a run)."""
    return EvalSet.from_file(folder / f"{name}.yaml")


def smoke(dataset: EvalSet) -> EvalSet:
    """The cases of ``dataset`` the offline demo model knows."""
    cases = [c for c in dataset.cases if c.metadata is not None and c.metadata.smoke]
    return EvalSet(name=dataset.name, cases=cases)
