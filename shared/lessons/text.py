"""What the document tools do to a lesson's text: read a line range, search, replace.

Pure functions over the body (a string); the tools add the store. Lines are 1-based
and split on ``\\n`` only, as editors count them. Searches go through RE2 (the
``google-re2`` package): its matching time grows linearly with the text, whatever the
pattern, so a pattern from the user or the model (``(a+)+$`` on a long line) cannot
hang the process; patterns RE2 cannot run in linear time (back-references,
look-arounds) are refused with a clear error instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import re2

from shared.errors import ToolError

MAX_MATCHES = 20
MAX_PATTERN_CHARS = 500
_RE2_MEMORY = 8 << 20  # bytes RE2 may use to compile one pattern


def split_lines(body: str) -> list[str]:
    """The body's lines; an empty body has none."""
    return body.split("\n") if body else []


@dataclass(frozen=True, slots=True)
class Stats:
    lines: int
    words: int
    characters: int


def header(title: str, stats: Stats, version: int) -> str:
    return f'Lesson: "{title}" ({stats.lines} lines, {stats.words} words, version {version})'


def read_range(body: str, start: int | None, end: int | None, cap: int) -> tuple[str, int, int]:
    """Lines ``start``..``end`` (inclusive, 1-based; omitted: from the first, to the
    last) numbered ``"12: text"``, cut at ``cap`` characters on a line boundary.

    Returns the text and the first and last line it holds.

    Raises:
        ToolError: the range is outside the document or backwards.
    """
    lines = split_lines(body)
    if not lines:
        return "(The lesson is empty.)", 0, 0
    first = start or 1
    last = min(end or len(lines), len(lines))
    if first > len(lines):
        raise ToolError(f"The lesson has {len(lines)} lines; start_line {first} is past the end.")
    if end is not None and end < first:
        raise ToolError(f"end_line ({end}) is before start_line ({first}).")
    out: list[str] = []
    size = 0
    shown = first - 1
    for number in range(first, last + 1):
        line = f"{number}: {lines[number - 1]}"
        if out and size + len(line) + 1 > cap:
            break
        out.append(line if len(line) <= cap else line[:cap] + " …")
        size += len(line) + 1
        shown = number
    text = "\n".join(out)
    if shown < last:
        text += (
            f"\n… (output cut at line {shown} of {last}: read the rest with start_line={shown + 1})"
        )
    return text, first, shown


def compile_pattern(query: str, is_regex: bool, case_sensitive: bool) -> Any:
    """The RE2 program for ``query`` (a literal unless ``is_regex``).

    Raises:
        ToolError: the query is empty, too long, or not a regular expression RE2 runs.
    """
    if not query:
        raise ToolError("The query is empty; give the text or pattern to look for.")
    if len(query) > MAX_PATTERN_CHARS:
        raise ToolError(f"The query is longer than {MAX_PATTERN_CHARS} characters; shorten it.")
    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.literal = not is_regex
    options.max_mem = _RE2_MEMORY
    options.log_errors = False
    try:
        return re2.compile(query, options)
    except re2.error as exc:
        why = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ToolError(
            f"The pattern is not a regular expression this search accepts ({why}). "
            "Back-references and look-arounds are not supported; search for plain text "
            "with is_regex false, or simplify the pattern."
        ) from None


def search(body: str, query: str, is_regex: bool = False, case_sensitive: bool = False) -> str:
    """Up to ``MAX_MATCHES`` matching lines, each with one line of context before and
    after (``>`` marks the match), or a note that nothing matched.

    Raises:
        ToolError: the query cannot be used (see ``compile_pattern``).
    """
    pattern = compile_pattern(query, is_regex, case_sensitive)
    lines = split_lines(body)
    hits: list[int] = []
    total = 0
    for index, line in enumerate(lines):
        if pattern.search(line):
            total += 1
            if len(hits) < MAX_MATCHES:
                hits.append(index)
    kind = "pattern" if is_regex else "text"
    if not hits:
        return f'No line matches the {kind} "{query}".'
    blocks = []
    for index in hits:
        block = []
        if index > 0:
            block.append(f"{index}: {lines[index - 1]}")
        block.append(f"{index + 1}: > {lines[index]}")
        if index + 1 < len(lines):
            block.append(f"{index + 2}: {lines[index + 1]}")
        blocks.append("\n".join(block))
    head = f'{total} line{"s" if total != 1 else ""} match the {kind} "{query}"'
    if total > len(hits):
        head += f"; the first {len(hits)} are shown (narrow the search to see others)"
    return head + ":\n\n" + "\n\n".join(blocks)


def replace_first(body: str, find: str, replace: str) -> tuple[str, int, int]:
    """``body`` with the first occurrence of ``find`` (exact, case-sensitive) replaced.

    Returns the new body, the line where the match started, and how many further
    occurrences remain.

    Raises:
        ToolError: ``find`` is empty or does not occur.
    """
    if not find:
        raise ToolError("find is empty; give the exact text to replace.")
    at = body.find(find)
    if at < 0:
        shown = find if len(find) <= 80 else find[:80] + "…"
        raise ToolError(
            f'Text not found: "{shown}". The lesson may have changed, or the text differs '
            "(it must match exactly, case and spaces included). Use search_document to "
            "find the current text."
        )
    new = body[:at] + replace + body[at + len(find) :]
    remaining = body.count(find, at + len(find)) if find else 0
    return new, body.count("\n", 0, at) + 1, remaining


def _common_start(a: str, b: str) -> int:
    """The length of the longest common start of ``a`` and ``b`` (by halving: slices
    compare in C, so this is fast on long texts)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def removed_chars(old: str, new: str) -> int:
    """How many characters of ``old`` do not survive into ``new`` when ``new`` replaces it.

    Their common start and end survive (exact, and all there is to the usual small edit);
    of what lies between, the lines of ``old`` that ``new`` no longer has count as
    removed, whole even if one character changed, so the count errs towards "removed".
    Lines are compared as a multiset, not a sequence: moving text keeps it, and the
    count stays linear (``difflib``'s line matching is quadratic on repeated lines;
    tests/unit/test_lesson_versions.py edits such a lesson).
    """
    start = _common_start(old, new)
    end = _common_start(old[start:][::-1], new[start:][::-1])
    before, after = old[start : len(old) - end], new[start : len(new) - end]
    if not before or not after:
        return len(before)
    gone = Counter(before.split("\n")) - Counter(after.split("\n"))
    return min(sum((len(line) + 1) * count for line, count in gone.items()), len(before))
