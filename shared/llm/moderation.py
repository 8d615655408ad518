"""Judging what a young learner sends and is sent: one small interface (``Moderator``),
the categories it answers in, and a scripted fake (DESIGN §16).

A moderator is a provider like any other: only the egress holds one (``shared/egress``),
which meters and bounds its calls. The adapters live beside their chat adapters, the
only modules that import each SDK: OpenAI's ``POST /v1/moderations``
(``openai.OpenAIModerator``, ``omni-moderation-latest``: text and images) and Gemini's
safety ratings (``gemini.GeminiModerator``). With neither, ``make dev`` and the tests
judge with the offline stand-in (``shared/egress/offline_moderator.py``), which is a
word list, not protection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from shared.llm.base import ImagePart

Category = Literal["self_harm", "sexual", "violence", "hate", "harassment", "illicit"]
"""What a flag says was found: never the words themselves."""

CATEGORIES: tuple[Category, ...] = (
    "self_harm",
    "sexual",
    "violence",
    "hate",
    "harassment",
    "illicit",
)
"""Every category, the most pressing first: of several found, a verdict names the first
(self-harm before the rest, so that the reply given is the supportive one)."""

Direction = Literal["input", "output"]
"""What was judged: a user's turn (``input``) or the model's reply (``output``)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a moderator found: the categories flagged (none: the text may pass)."""

    categories: tuple[Category, ...] = ()

    @property
    def flagged(self) -> bool:
        return bool(self.categories)

    @property
    def category(self) -> Category | None:
        """The most pressing category flagged (``CATEGORIES``' order), if any."""
        for category in CATEGORIES:
            if category in self.categories:
                return category
        return None


CLEAR = Verdict()


def verdict_of(found: Sequence[Category]) -> Verdict:
    """A verdict of ``found``, in ``CATEGORIES``' order, each once."""
    return Verdict(tuple(c for c in CATEGORIES if c in found))


class Moderator(Protocol):
    """A model (or a stand-in) that judges text and images."""

    @property
    def label(self) -> str:
        """The moderator's name, e.g. ``omni-moderation-latest``."""
        ...

    @property
    def provider(self) -> str:
        """Whose it is (``openai``, ``google``, ``offline``): the processor a parent
        consents to."""
        ...

    async def judge(self, text: str, images: Sequence[ImagePart] = ()) -> Verdict:
        """What ``text`` and ``images`` hold of the categories.

        Raises:
            ProviderError: the moderator failed (the egress decides what that means).
        """
        ...


@dataclass
class ScriptedModerator:
    """Judges as it is told (tests): ``rule`` gives the verdict of a text, and images
    are flagged by their exact bytes (``flag_image``). Every call is recorded; ``gate``,
    when set, is awaited before each answer, so a test can hold the moderator for as
    long as it needs (a slow or hanging moderator) on a machine of any speed."""

    rule: Callable[[str], Verdict] = lambda _text: CLEAR
    images: dict[str, Category] = field(default_factory=dict)
    calls: list[tuple[str, int]] = field(default_factory=list)
    gate: asyncio.Event | None = None
    failure: Exception | None = None

    @property
    def label(self) -> str:
        return "scripted-moderator"

    @property
    def provider(self) -> str:
        return "scripted"

    def flag_image(self, image: ImagePart, category: Category) -> None:
        self.images[image.data] = category

    async def judge(self, text: str, images: Sequence[ImagePart] = ()) -> Verdict:
        self.calls.append((text, len(images)))
        if self.gate is not None:
            await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        found = list(self.rule(text).categories)
        found += [self.images[i.data] for i in images if i.data in self.images]
        return verdict_of(found)
