"""Text as the screen compares it: folded the same way on both sides, mapped back.

People (and models) do not quote a message as it was written: they put it in italics
(``_like this_``), join it with hyphens (``pick-me-up``), wrap it in HTML, escape it as
JSON inside prose, write a number as ``7,731`` or ``77-31`` and a time as ``4.30 pm``,
and some words arrive with a zero-width joiner inside or a Cyrillic letter in place of
a Latin one. So before anything is compared, a text is folded into *tokens*:

* markup goes (a tag is a separator; an entity such as ``&nbsp;`` or ``&#112;`` is the
  character it names), and so do JSON escapes (``\\n`` is a separator, ``\\u0070`` the
  character);
* each character is put in Unicode's compatibility form (NFKC: full-width and styled
  letters become plain ones), case-folded, stripped if it is default-ignorable (joiners,
  soft hyphens, variation selectors: invisible), and folded to the letter it is
  confusable with (the Unicode confusables data, UTS #39, as ``confusable_homoglyphs``
  ships it: Cyrillic ``а`` is ``a``);
* every run of anything that is not a letter or a digit separates tokens, letters and
  digits side by side are separate tokens (``30pm`` is ``30`` and ``pm``), and digit
  tokens with only separators between them are one digit sequence (``7,731``,
  ``77-31`` and ``7731`` are all ``7731``; ``4:30pm`` and ``4.30 pm`` are ``430 pm``);
* a character of a script written without spaces (Han, kana, Hangul syllables) is a
  token of its own, so a quote from the middle of a Chinese sentence is found too.

Each token keeps the span of the original text it came from, so what is found can be
blanked where it stands.
"""

from __future__ import annotations

import html
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from functools import cache

import confusable_homoglyphs

_UNIT = re.compile(
    r"<[^<>]{0,256}>"  # a tag
    r"|&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"  # an entity
    r"|\\u[0-9a-fA-F]{4}"  # a JSON escape of a character
    r"|\\[nrtbf\"'\\/]"  # a JSON escape of a separator
)
_SEPARATOR = " "

# Default-ignorable code points that are not of category Cf (format characters, which
# are all dropped): variation selectors, the combining grapheme joiner, Hangul fillers,
# Mongolian free variation selectors.
_IGNORABLE = frozenset(
    [
        0x034F,
        0x115F,
        0x1160,
        0x3164,
        0xFFA0,
        0x180B,
        0x180C,
        0x180D,
        0x180F,
        *range(0xFE00, 0xFE10),
        *range(0xE0100, 0xE01F0),
    ]
)


@dataclass(frozen=True, slots=True)
class Token:
    """One token of a folded text: its key, and the span of the original it covers."""

    key: str
    start: int
    end: int

    @property
    def spaceless(self) -> bool:
        """Whether it is one character of a script written without spaces."""
        return len(self.key) == 1 and _spaceless(self.key)


@cache
def _confusables() -> dict[str, str]:
    """Each character the confusables data maps to one plain lower-case ASCII letter
    or digit, with that letter (read once, on the first screen that needs it)."""
    path = os.path.join(os.path.dirname(confusable_homoglyphs.__file__), "confusables.json")
    with open(path, encoding="utf-8") as data:
        table: dict[str, list[dict[str, str]]] = json.load(data)
    folded: dict[str, str] = {}
    for char, glyphs in table.items():
        if len(char) != 1 or char.isascii():
            continue  # ASCII stays itself: "0" is not "o", nor "l" "1"
        for glyph in glyphs:
            plain = glyph["c"].casefold()
            if len(plain) == 1 and plain.isascii() and plain.isalnum():
                folded[char] = plain
                break
    return folded


def _spaceless(char: str) -> bool:
    code = ord(char)
    return (
        0x3040 <= code <= 0x30FF  # Hiragana, Katakana
        or 0x3400 <= code <= 0x4DBF  # CJK extension A
        or 0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0xF900 <= code <= 0xFAFF  # CJK compatibility ideographs
        or 0xAC00 <= code <= 0xD7AF  # Hangul syllables
        or 0x20000 <= code <= 0x3134F  # CJK extensions B-H
    )


def _ignorable(char: str) -> bool:
    return unicodedata.category(char) == "Cf" or ord(char) in _IGNORABLE


def _fold_char(char: str) -> str:
    """One character as it is compared (possibly several, possibly none)."""
    if char.isascii():
        return char.lower()
    confusable = _confusables()
    out = []
    for one in unicodedata.normalize("NFKC", char).casefold():
        if _ignorable(one):
            continue
        out.append(confusable.get(one, one))
    return "".join(out)


def _unit(text: str) -> str:
    """What a tag, an entity or a JSON escape stands for."""
    if text.startswith("<"):
        return _SEPARATOR
    if text.startswith("&"):
        return html.unescape(text)
    if text.startswith("\\u"):
        return chr(int(text[2:], 16))
    return _SEPARATOR


@dataclass(frozen=True, slots=True)
class _Folded:
    """A text folded: for each character of ``text``, the index of the original
    character (or unit) it came from; each unit's end, by its start."""

    text: str
    origin: list[int]
    units: dict[int, int]

    def end(self, index: int) -> int:
        """The end in the original of what the folded character ``index`` came from."""
        start = self.origin[index]
        return self.units.get(start, start + 1)


def _folded(text: str) -> _Folded:
    out: list[str] = []
    origin: list[int] = []
    units: dict[int, int] = {}
    at = 0
    for unit in _UNIT.finditer(text) if ("<" in text or "&" in text or "\\" in text) else ():
        _fold_into(text, at, unit.start(), out, origin)
        for char in _unit(unit.group()):
            for one in _fold_char(char):
                out.append(one)
                origin.append(unit.start())
        units[unit.start()] = unit.end()
        at = unit.end()
    _fold_into(text, at, len(text), out, origin)
    return _Folded("".join(out), origin, units)


def _fold_into(text: str, start: int, end: int, out: list[str], origin: list[int]) -> None:
    piece = text[start:end]
    if piece.isascii():
        out.append(piece.lower())
        origin.extend(range(start, end))
        return
    for index in range(start, end):
        for one in _fold_char(text[index]):
            out.append(one)
            origin.append(index)


_PIECE = re.compile(r"[^\W\d_]+|\d+")


def tokens(text: str) -> list[Token]:
    """``text``'s tokens, in order (the module's docstring says how it is folded)."""
    folded = _folded(text)
    found: list[Token] = []
    joinable = False  # the last token is digits, with only separators after it
    for piece in _PIECE.finditer(folded.text):
        key = piece.group()
        start, end = folded.origin[piece.start()], folded.end(piece.end() - 1)
        digits = key.isdigit()
        if digits and joinable:
            last = found[-1]
            found[-1] = Token(last.key + key, last.start, end)
        elif not digits and not key.isascii() and any(_spaceless(c) for c in key):
            found.extend(_characters(key, piece.start(), folded))
        else:
            found.append(Token(key, start, end))
        joinable = digits
    return found


def _characters(key: str, offset: int, folded: _Folded) -> list[Token]:
    """A run of letters that holds characters of a script written without spaces, as
    one token per such character (the others together, between them)."""
    out: list[Token] = []
    word = ""
    word_start = offset
    for n, char in enumerate(key):
        if _spaceless(char):
            if word:
                out.append(Token(word, folded.origin[word_start], folded.end(offset + n - 1)))
                word = ""
            out.append(Token(char, folded.origin[offset + n], folded.end(offset + n)))
        else:
            if not word:
                word_start = offset + n
            word += char
    if word:
        out.append(Token(word, folded.origin[word_start], folded.end(offset + len(key) - 1)))
    return out
