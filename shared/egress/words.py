"""Finding a withheld message's words in outgoing text, and blanking them.

A model that was given a family message rarely sends it back whole: it quotes a
sentence, a time, a code. So a message is withheld as *runs of its words*: any
``RUN`` words in a row of it, wherever they stand in what is sent (in any case, with
any punctuation or spacing between them), and each of its *marks* on its own: a word
that holds a digit and is at least ``MARK_CHARS`` long (``4:30``, ``7731``, a phone
number), which says something even alone. A message shorter than ``RUN`` words is
withheld as the whole run it is, unless it is too short to say anything (``ok``).

What cannot be found this way: the same thing said in other words (a summary, a
translation, a paraphrase). The docs say so.

Text that is JSON (a tool's arguments or result) is screened value by value, so a
quote split by an escape (``\\n``) is found as the words it is.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

RUN = 3
"""Words in a row of a withheld message that are blanked wherever they appear: fewer
would blank ordinary pairs ("at seven"); more would let a model's short quotes through."""
MARK_CHARS = 3
"""A word with a digit this long or longer is a mark (a time, a code) and is blanked
alone; shorter ones ("5", "2b") are too common to withhold."""
MIN_SHORT_CHARS = 4
"""A message of fewer than ``RUN`` words is withheld whole only when it holds at least
this many letters or digits: "ok" or "yes" says nothing of the member."""
WITHHELD = "[withheld]"

_WORD = re.compile(r"\w+(?:['’:.,/-]\w+)*")
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'"})


def _key(word: str) -> str:
    return unicodedata.normalize("NFKC", word).translate(_APOSTROPHES).casefold()


def _words(text: str) -> list[re.Match[str]]:
    return list(_WORD.finditer(text))


def _is_mark(word: str) -> bool:
    return len(word) >= MARK_CHARS and any(c.isdigit() for c in word)


@dataclass(frozen=True, slots=True)
class Withheld:
    """The runs of words (by length) that must not leave, from the texts withheld now."""

    runs: dict[int, frozenset[tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def of(cls, texts: Iterable[str]) -> Withheld:
        """What withholding ``texts`` means for outgoing text."""
        found: dict[int, set[tuple[str, ...]]] = {}
        for text in texts:
            keys = [_key(m.group()) for m in _words(text)]
            if len(keys) >= RUN:
                found.setdefault(RUN, set()).update(
                    tuple(keys[i : i + RUN]) for i in range(len(keys) - RUN + 1)
                )
            elif keys and sum(len(k) for k in keys) >= MIN_SHORT_CHARS:
                found.setdefault(len(keys), set()).add(tuple(keys))
            found.setdefault(1, set()).update((k,) for k in keys if _is_mark(k))
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
        words = _words(text)
        keys = [_key(m.group()) for m in words]
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
            start = words[i].start()
            while i + 1 < len(words) and covered[i + 1]:
                i += 1
            out += [text[at:start], WITHHELD]
            at = words[i].end()
            i += 1
        out.append(text[at:])
        return "".join(out)
