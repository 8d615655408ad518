"""Finding a withheld message's words in outgoing text, and blanking them.

A model that was given a family message rarely sends it back whole: it quotes a
sentence, a time, a code. So a message is withheld as *runs of its words*: any
``RUN`` words in a row of it, wherever they stand in what is sent, and each of its
*marks* on its own: a number of at least ``MARK_CHARS`` digits (``4:30``, ``7731``, a
phone number), which says something even alone. A message shorter than a run is
withheld as the whole run it is, unless it is too short to say anything (``ok``).

Both sides are compared as ``fold.tokens`` makes them: in any case, with any
punctuation, spacing, markup or escaping between the words, in look-alike letters or
with invisible characters inside them, and numbers however they are grouped. In
scripts written without spaces (Chinese, Japanese) each character is a token, and
``SPACELESS_PER_WORD`` of them count as a word.

What cannot be found this way: the same thing said in other words (a summary, a
translation, a paraphrase). The docs say so.

Text that is JSON (a tool's arguments or result) is screened value by value, so a
quote split by an escape (``\\n``) is found as the words it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.egress.fold import Token, tokens

RUN = 3
"""Words in a row of a withheld message that are blanked wherever they appear: fewer
would blank ordinary pairs ("at seven"); more would let a model's short quotes through."""
SPACELESS_PER_WORD = 2
"""Characters of a script written without spaces that count as one word of a run: a run
there is six characters, about three words of Chinese (three characters would blank
ordinary phrases)."""
MARK_CHARS = 3
"""A number this many digits long or longer is a mark (a time, a code) and is blanked
alone; shorter ones ("5", "12") are too common to withhold."""
MIN_SHORT_CHARS = 4
"""A message of fewer than ``RUN`` words is withheld whole only when it holds at least
this many letters or digits: "ok" or "yes" says nothing of the member."""
WITHHELD = "[withheld]"


def _weight(token: Token) -> int:
    """A token's share of a run, in ``SPACELESS_PER_WORD``ths of a word."""
    return 1 if token.spaceless else SPACELESS_PER_WORD


def _runs(found: Sequence[Token]) -> Iterable[tuple[str, ...]]:
    """Each shortest run of ``found`` that weighs ``RUN`` words, from every start."""
    need = RUN * SPACELESS_PER_WORD
    end, weight = 0, 0
    for start in range(len(found)):
        while end < len(found) and weight < need:
            weight += _weight(found[end])
            end += 1
        if weight < need:
            return
        yield tuple(t.key for t in found[start:end])
        weight -= _weight(found[start])


def _is_mark(token: Token) -> bool:
    return len(token.key) >= MARK_CHARS and token.key.isdigit()


@dataclass(frozen=True, slots=True)
class Withheld:
    """The runs of words (by length) that must not leave, from the texts withheld now."""

    runs: dict[int, frozenset[tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def of(cls, texts: Iterable[str]) -> Withheld:
        """What withholding ``texts`` means for outgoing text."""
        found: dict[int, set[tuple[str, ...]]] = {}
        for text in texts:
            words = tokens(text)
            runs = list(_runs(words))
            for run in runs:
                found.setdefault(len(run), set()).add(run)
            if not runs and words and sum(len(t.key) for t in words) >= MIN_SHORT_CHARS:
                found.setdefault(len(words), set()).add(tuple(t.key for t in words))
            found.setdefault(1, set()).update((t.key,) for t in words if _is_mark(t))
        return cls({n: frozenset(runs) for n, runs in found.items() if runs})

    def __bool__(self) -> bool:
        return bool(self.runs)

    def found_in(self, text: str) -> bool:
        """Whether ``text`` carries any withheld run (as ``text``, or inside its JSON)."""
        return self.text(text) != text

    def text(self, text: str) -> str:
        """``text`` with every withheld run in it blanked (as JSON, value by value, when
        it is JSON)."""
        if not self.runs or not text:
            return text
        stripped = text.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                value = json.loads(text)
            except ValueError:
                pass
            else:
                screened = self._value(value)
                if screened == value:
                    return text
                return json.dumps(screened, ensure_ascii=False)
        return self._plain(text)

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._plain(value)
        if isinstance(value, list):
            return [self._value(v) for v in value]
        if isinstance(value, dict):
            return {k: self._value(v) for k, v in value.items()}
        return value

    def _plain(self, text: str) -> str:
        words = tokens(text)
        keys = [t.key for t in words]
        covered = [False] * len(words)
        for n, runs in self.runs.items():
            for i in range(len(keys) - n + 1):
                if tuple(keys[i : i + n]) in runs:
                    covered[i : i + n] = [True] * n
        if not any(covered):
            return text
        out: list[str] = []
        at = 0
        i = 0
        while i < len(words):
            if not covered[i]:
                i += 1
                continue
            start = words[i].start
            while i + 1 < len(words) and covered[i + 1]:
                i += 1
            out += [text[at:start], WITHHELD]
            at = max(at, words[i].end)
            i += 1
        out.append(text[at:])
        return "".join(out)
