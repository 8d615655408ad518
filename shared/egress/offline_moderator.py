"""``OfflineModerator``: a word list judged the way the screen reads text, for ``make
dev`` and the tests, where no moderation provider is configured (DESIGN §16).

**A stand-in, never protection.** It flags the phrases listed below and nothing else:
it cannot read a paraphrase, a euphemism, a misspelling it was not told of, another
language or an image, and a child who wants past it will get past it. A deployment with
dependents uses a real moderator (OpenAI's, or Gemini's safety ratings); this one lets
the rest of the safety path (held tokens, kind replies, withheld replies, parents'
flags) run and be tested without one.

What it does catch, because it reads text as ``fold.tokens`` makes it (the screen's
folding): any case, punctuation or markup between the words, full-width and styled
letters, look-alike letters of other scripts (Cyrillic ``а``), invisible characters
inside words; and on top of that, letters spelt out one by one (``k i l l``,
``s.e.x``) and the usual digits and signs for letters (``k1ll``, ``$ex``, ``h4te``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from shared.egress.fold import tokens
from shared.llm.base import ImagePart
from shared.llm.moderation import Category, Verdict, verdict_of

PHRASES: dict[Category, tuple[str, ...]] = {
    "self_harm": (
        "kill myself",
        "killing myself",
        "end my life",
        "ending my life",
        "want to die",
        "wanna die",
        "hurt myself",
        "hurting myself",
        "cut myself",
        "cutting myself",
        "self harm",
        "selfharm",
        "suicide",
        "suicidal",
        "take my own life",
        "better off dead",
    ),
    "sexual": (
        "sex",
        "sexy",
        "porn",
        "porno",
        "pornography",
        "nudes",
        "nude pics",
        "naked pictures",
        "send nudes",
    ),
    "violence": (
        "kill you",
        "kill him",
        "kill her",
        "kill them",
        "murder you",
        "stab you",
        "stab him",
        "shoot up",
        "make a bomb",
        "build a bomb",
        "beat you up",
        "beat him up",
    ),
    "hate": (
        "subhuman",
        "inferior race",
        "go back to your country",
        "racial purity",
    ),
    "harassment": (
        "kill yourself",
        "kys",
        "nobody likes you",
        "you are worthless",
        "youre worthless",
        "you re worthless",
        "you should die",
        "everyone hates you",
    ),
    "illicit": (
        "buy drugs",
        "cocaine",
        "heroin",
        "meth",
        "buy a vape",
        "buy weed",
        "shoplift",
        "how to steal",
        "fake id",
    ),
}
"""The phrases flagged, by category: a short list, as the module's docstring says."""

_LEET = {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "@": "a", "$": "s"}
_LEET_L = {**_LEET, "1": "l", "!": "i", "|": "l"}
# A digit or sign for a letter, standing beside a letter (``k1ll``, ``$ex``): alone
# (``5 apples``, ``1 2 3``) it is a number.
_BESIDE = re.compile(r"(?<=[^\W\d_])[0-9@$!|]+|[0-9@$!|]+(?=[^\W\d_])")
SPELT_OUT = 3
"""Single letters in a row read as one word (``k i l l``): fewer are ordinary (``a b``)."""


def _words(phrase: str) -> tuple[str, ...]:
    return tuple(t.key for t in tokens(phrase))


_TABLE: dict[int, dict[tuple[str, ...], Category]] = {}
for _category, _phrases in PHRASES.items():
    for _phrase in _phrases:
        _key = _words(_phrase)
        _TABLE.setdefault(len(_key), {})[_key] = _category
_SQUASHED: dict[str, Category] = {
    "".join(key): category for table in _TABLE.values() for key, category in table.items()
}


def _variants(text: str) -> Iterable[str]:
    """``text`` as it stands, and with the signs beside letters read as letters (``1``
    as ``i``, then as ``l``)."""
    yield text
    yield _BESIDE.sub(lambda m: _as_letters(m.group(), _LEET), text)
    yield _BESIDE.sub(lambda m: _as_letters(m.group(), _LEET_L), text)


def _as_letters(signs: str, table: dict[str, str]) -> str:
    return "".join(table.get(c, c) for c in signs)


def _found(keys: Sequence[str]) -> set[Category]:
    found: set[Category] = set()
    for words in (keys, _joined(keys), _joined(keys, apart=True)):
        for n, table in _TABLE.items():
            for i in range(len(words) - n + 1):
                category = table.get(tuple(words[i : i + n]))
                if category is not None:
                    found.add(category)
    found.update(_spelt_out(keys))
    return found


def _joined(keys: Sequence[str], apart: bool = False) -> list[str]:
    """``keys`` with each run of single letters read as one word (``kill m y s e l f``
    is ``kill myself``); ``apart``: its first letter a word of its own when it is one
    (``make a b o m b`` is ``make a bomb``)."""
    out: list[str] = []
    run: list[str] = []
    for key in [*keys, ""]:
        if len(key) == 1:
            run.append(_LEET.get(key, key))
            continue
        if apart and len(run) > SPELT_OUT and run[0] in ("a", "i"):
            out.append(run.pop(0))
        out += ["".join(run)] if len(run) >= SPELT_OUT else run
        run = []
        if key:
            out.append(key)
    return out


def _spelt_out(keys: Sequence[str]) -> set[Category]:
    """The phrases inside runs of single letters or digits (``k i l l m y s e l f``)."""
    found: set[Category] = set()
    run: list[str] = []
    for key in [*keys, ""]:
        if len(key) == 1:
            run.append(_LEET.get(key, key))
            continue
        if len(run) >= SPELT_OUT:
            joined = "".join(run)
            found.update(c for squashed, c in _SQUASHED.items() if squashed in joined)
        run = []
    return found


def judged(text: str) -> Verdict:
    """The offline verdict of ``text`` (what ``OfflineModerator.judge`` answers)."""
    found: set[Category] = set()
    for variant in dict.fromkeys(_variants(text)):
        found |= _found([t.key for t in tokens(variant)])
    return verdict_of(sorted(found))


class OfflineModerator:
    """The word-list stand-in (the module's docstring says what it is not); it cannot
    see images, which pass."""

    @property
    def label(self) -> str:
        return "offline-word-list"

    @property
    def provider(self) -> str:
        return "offline"

    async def judge(self, text: str, images: Sequence[ImagePart] = ()) -> Verdict:
        return judged(text)
