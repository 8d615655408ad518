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
scripts written without spaces (Chinese, Japanese, Korean, Thai) each character is a
token, and a run is as many of them as weigh ``RUN`` words (``WEIGHTS``). What only
looks like markup (``a<b then …>``, a tag's attribute) is read both as markup and as
text, on both sides.

What cannot be found this way: the same thing said in other words (a summary, a
translation, a paraphrase). The docs say so.

Text that is JSON (a tool's arguments or result) is screened value by value, so a
quote split by an escape (``\\n``) is found as the words it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.egress.fold import Kind, Token, tokens

RUN = 3
"""Words in a row of a withheld message that are blanked wherever they appear: fewer
would blank ordinary pairs ("at seven"); more would let a model's short quotes through."""
WEIGHTS: dict[Kind, int] = {
    "word": 40,
    "number": 40,
    # A Chinese character says about what two thirds of an English word does: five make
    # a run ("明天下午" stays, "四点半在体" goes).
    "han": 24,
    # Kana spell sounds, often grammar and politeness ("してください" stays): ten.
    "kana": 12,
    # Korean is written in syllables, about three to a word: eight.
    "hangul": 15,
    # Thai, Lao, Khmer and Myanmar are written in letters without spaces: fifteen.
    "unspaced": 8,
}
"""Each kind of token's share of a run: a run is the fewest tokens in a row weighing
``FULL``, ``RUN`` words."""
FULL = RUN * WEIGHTS["word"]
MARK_CHARS = 3
"""A number this many digits long or longer is a mark (a time, a code) and is blanked
alone, as is each part of it that spaces set apart (``07700 900-123``: ``07700`` and
``900123`` too); shorter ones ("5", "12") are too common to withhold."""
MIN_SHORT_CHARS = 4
"""A message of fewer than ``RUN`` words is withheld whole only when it holds at least
this many letters or digits: "ok" or "yes" says nothing of the member."""
WITHHELD = "[withheld]"


def _weight(token: Token) -> int:
    return WEIGHTS[token.kind]


def _runs(found: Sequence[Token]) -> Iterable[tuple[str, ...]]:
    """Each shortest run of ``found`` that weighs ``RUN`` words, from every start."""
    need = FULL
    end, weight = 0, 0
    for start in range(len(found)):
        while end < len(found) and weight < need:
            weight += _weight(found[end])
            end += 1
        if weight < need:
            return
        yield tuple(t.key for t in found[start:end])
        weight -= _weight(found[start])


def _marks(token: Token) -> Iterator[str]:
    """The marks ``token`` gives, if it is a long enough number: its digits, and each
    part of it that spaces set apart."""
    if token.key.isdigit():
        for mark in (token.key, *token.parts):
            if len(mark) >= MARK_CHARS:
                yield mark


def _readings(text: str) -> list[list[Token]]:
    """``text``'s tokens, and if anything in it looks like a tag, its tokens with tags
    read as text as well (``a<b then pick me up>``, ``<span title="pick me up">``)."""
    if "<" in text:
        return [tokens(text), tokens(text, tags=False)]
    return [tokens(text)]


@dataclass(frozen=True, slots=True)
class Withheld:
    """The runs of words (by length) that must not leave, from the texts withheld now."""

    runs: dict[int, frozenset[tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def of(cls, texts: Iterable[str]) -> Withheld:
        """What withholding ``texts`` means for outgoing text."""
        found: dict[int, set[tuple[str, ...]]] = {}
        for words in (words for text in texts for words in _readings(text)):
            runs = list(_runs(words))
            for run in runs:
                found.setdefault(len(run), set()).add(run)
            if not runs and words and sum(len(t.key) for t in words) >= MIN_SHORT_CHARS:
                found.setdefault(len(words), set()).add(tuple(t.key for t in words))
            found.setdefault(1, set()).update((m,) for t in words for m in _marks(t))
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
        spans = [span for words in _readings(text) for span in self._found(words)]
        if not spans:
            return text
        out: list[str] = []
        at = 0
        for start, end in _merged(spans):
            out += [text[at:start], WITHHELD]
            at = end
        out.append(text[at:])
        return "".join(out)

    def _found(self, words: Sequence[Token]) -> Iterator[tuple[int, int]]:
        """The spans of the original text that ``words`` shows withheld."""
        keys = [t.key for t in words]
        for n, runs in self.runs.items():
            for i in range(len(keys) - n + 1):
                if tuple(keys[i : i + n]) in runs:
                    yield words[i].start, words[i + n - 1].end


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` in order, those that overlap or touch as one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
