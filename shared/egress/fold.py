"""Text as the screen compares it: folded the same way on both sides, mapped back.

People (and models) do not quote a message as it was written: they put it in italics
(``_like this_``), join it with hyphens (``pick-me-up``), wrap it in HTML, escape it as
JSON inside prose, write a number as ``7,731`` or ``77-31`` and a time as ``4.30 pm``,
and some words arrive with a zero-width joiner inside or a Cyrillic letter in place of
a Latin one. So before anything is compared, a text is folded into *tokens*:

* markup goes: a tag inside a word is nothing (``pi<span>ck</span>``) and any other tag
  a separator (``<br>``, ``<p>``); an entity such as ``&nbsp;`` or ``&#112;`` is the
  character it names; JSON escapes too (``\\n`` is a separator, ``\\u0070`` the
  character). What only looks like a tag (``a<b then pick me up>``, or words in a tag's
  attribute) is also read as text: ``tokens(text, tags=False)``, which the screen
  reads as well;
* each character is put in Unicode's compatibility form (NFKC: full-width and styled
  letters become plain ones), stripped of accents and other combining marks (``é`` is
  ``e``), case-folded, stripped if it is default-ignorable (joiners, soft hyphens,
  variation selectors: invisible), folded to the letter it is confusable with (the
  Unicode confusables data, UTS #39, as ``confusable_homoglyphs`` ships it: Cyrillic
  ``а`` is ``a``), and a digit of any script is its ASCII digit;
* every run of anything that is not a letter or a digit separates tokens, letters and
  digits side by side are separate tokens (``30pm`` is ``30`` and ``pm``), and digit
  groups with one separator between them are one digit sequence (``7,731``, ``77-31``
  and ``7731`` are all ``7731``; ``4:30pm`` and ``4.30 pm`` are ``430 pm``), which keeps
  the parts that spaces set apart (``07700 900-123``: ``07700`` and ``900123``);
* a character of a script written without spaces (Han, kana, Hangul syllables; Thai,
  Lao, Khmer and Myanmar letters) is a token of its own, so a quote from the middle of a
  Chinese sentence is found too.

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
from functools import cache, lru_cache
from typing import Literal

import confusable_homoglyphs

_ESCAPE = (
    r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"  # an entity
    r"|\\u[0-9a-fA-F]{4}"  # a JSON escape of a character
    r"|\\[nrtbf\"'\\/]"  # a JSON escape of a separator
)
_UNIT = re.compile(r"<(/?[A-Za-z][A-Za-z0-9]{0,31})\b[^<>]{0,256}>|" + _ESCAPE)  # or a tag
_ESCAPE_UNIT = re.compile(_ESCAPE)
_SEPARATOR = " "
# Tags that stand inside a word as well as between words: read as nothing, so
# ``pi<b>ck</b>`` is "pick" (a tag between words has spaces or other tags around it).
_INLINE = re.compile(
    r"a|abbr|b|bdi|bdo|cite|code|data|del|dfn|em|font|i|ins|kbd|mark|q|s|samp|small|span"
    r"|strong|sub|sup|time|tt|u|var|wbr"
)

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


Kind = Literal["word", "number", "han", "kana", "hangul", "unspaced"]
"""What a token is: a word or a number of a spaced script, or one character of a script
written without spaces (``words.py`` weighs each kind's share of a run)."""


@dataclass(frozen=True, slots=True)
class Token:
    """One token of a folded text: its key, the span of the original it covers, and
    for a number written in parts set apart by spaces, those parts."""

    key: str
    start: int
    end: int
    parts: tuple[str, ...] = ()

    @property
    def kind(self) -> Kind:
        """What the token is (one character of a script without spaces, or not)."""
        if len(self.key) == 1:
            script = _script(self.key)
            if script is not None:
                return script
        return "number" if self.key.isdigit() else "word"

    @property
    def spaceless(self) -> bool:
        """Whether it is one character of a script written without spaces."""
        return len(self.key) == 1 and _script(self.key) is not None


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


def _script(char: str) -> Kind | None:
    """The script without spaces ``char`` belongs to, if it does."""
    code = ord(char)
    if code < 0x0E00:
        return None
    if (
        0x3400 <= code <= 0x4DBF  # CJK extension A
        or 0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0xF900 <= code <= 0xFAFF  # CJK compatibility ideographs
        or 0x20000 <= code <= 0x3134F  # CJK extensions B-H
        or 0x3005 <= code <= 0x3007  # iteration mark, closing mark, ideographic zero
    ):
        return "han"
    if 0x3040 <= code <= 0x30FF:  # Hiragana, Katakana
        return "kana"
    if 0xAC00 <= code <= 0xD7AF or 0x1100 <= code <= 0x11FF or 0x3130 <= code <= 0x318F:
        return "hangul"  # syllables, and the jamo they are written with
    if (
        0x0E00 <= code <= 0x0EFF  # Thai, Lao
        or 0x1000 <= code <= 0x109F  # Myanmar
        or 0x1780 <= code <= 0x17FF  # Khmer
    ):
        return "unspaced"
    return None


def _spaceless(char: str) -> bool:
    return _script(char) is not None


def _ignorable(char: str) -> bool:
    return unicodedata.category(char) == "Cf" or ord(char) in _IGNORABLE


@lru_cache(maxsize=8192)
def _fold_char(char: str) -> str:
    """One character as it is compared (possibly several, possibly none); the last few
    thousand kept, as a text repeats its characters (and no text can grow the cache)."""
    if char.isascii():
        return char.lower()
    confusable = _confusables()
    out = []
    # Compatibility forms, then accents and other combining marks dropped (decomposed,
    # the marks left out, composed again: a Hangul syllable comes back whole).
    plain = unicodedata.normalize("NFKD", char)
    plain = "".join(c for c in plain if unicodedata.category(c) not in ("Mn", "Me"))
    for one in unicodedata.normalize("NFC", plain).casefold():
        if _ignorable(one):
            continue
        digit = unicodedata.decimal(one, None)
        out.append(str(digit) if digit is not None else confusable.get(one, one))
    return "".join(out)


def _unit(found: re.Match[str]) -> str:
    """What a tag, an entity or a JSON escape stands for."""
    text = found.group()
    if text.startswith("<"):
        name = found.group(1).lstrip("/").lower()
        return "" if _INLINE.fullmatch(name) else _SEPARATOR
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


def _folded(text: str, tags: bool) -> _Folded:
    out: list[str] = []
    origin: list[int] = []
    units: dict[int, int] = {}
    at = 0
    pattern = _UNIT if tags else _ESCAPE_UNIT
    for unit in pattern.finditer(text) if ("<" in text or "&" in text or "\\" in text) else ():
        _fold_into(text, at, unit.start(), out, origin)
        for char in _unit(unit):
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


def tokens(text: str, tags: bool = True) -> list[Token]:
    """``text``'s tokens, in order (the module's docstring says how it is folded); with
    ``tags`` false, what looks like an HTML tag is read as text."""
    folded = _folded(text, tags)
    found: list[Token] = []
    # The last token is digits with one separator after it: the next digits join it.
    joinable = False
    last_end = -1
    for piece in _PIECE.finditer(folded.text):
        key = piece.group()
        start, end = folded.origin[piece.start()], folded.end(piece.end() - 1)
        digits = key.isdigit()
        if digits and joinable and piece.start() - last_end == 1:
            last = found[-1]
            parts = last.parts or (last.key,)
            if folded.text[last_end].isspace():
                parts = (*parts, key)
            else:
                parts = (*parts[:-1], parts[-1] + key)
            found[-1] = Token(last.key + key, last.start, end, parts)
        elif not digits and not key.isascii() and any(_spaceless(c) for c in key):
            found.extend(_characters(key, piece.start(), folded))
        else:
            found.append(Token(key, start, end))
        joinable = digits
        last_end = piece.end()
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
