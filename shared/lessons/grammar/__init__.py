"""The lesson XML grammar, and its validator.

A lesson body is XML with the root ``<lesson>``. Its elements, their attributes and
where each may go are declared once, in ``ELEMENTS``; the skills in
``prompts/skills/`` teach the model the same grammar, and a test holds the two
together (every example in a skill validates).

Lessons are parsed with a real XML parser, hardened by ``defusedxml``: a DTD, an entity
declaration or an external reference is refused before anything is expanded, so a
"billion laughs" or an ``file:///etc/passwd`` entity can do nothing. Errors are written
for the model to fix: the line, the element, and what was expected::

    Line 7: <option> cannot go inside <p>. <p> may contain text, <b>, <i>, <br>, <blank>.

Elements that carry an ``id`` (exercises, questions, statements, items...) keep it
across edits: ``renamed_ids`` finds an edit that would change one.

``elements``: the grammar; ``parser``: the hardened parse; ``checks``: validation.
"""

from __future__ import annotations

from shared.lessons.grammar.checks import renamed_ids, validate
from shared.lessons.grammar.elements import ELEMENTS, MAX_LESSON_CHARS
from shared.lessons.grammar.parser import InvalidLesson, Node, ParsedLesson, blanks, parse

__all__ = [
    "ELEMENTS",
    "MAX_LESSON_CHARS",
    "InvalidLesson",
    "Node",
    "ParsedLesson",
    "blanks",
    "parse",
    "renamed_ids",
    "validate",
]
