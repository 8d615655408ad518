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
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from xml.sax import SAXParseException
from xml.sax.handler import ContentHandler
from xml.sax.xmlreader import AttributesImpl, Locator

from defusedxml import DefusedXmlException
from defusedxml.expatreader import create_parser

from shared.errors import SparkError

MAX_LESSON_CHARS = 200_000
"""A lesson body's limit: far below Firestore's 1 MiB, far above any real lesson."""
MAX_DEPTH = 12

EXERCISE_TYPES = (
    "fill-blanks",
    "multiple-choice",
    "true-false",
    "sequencing",
    "short-answer",
    "writing",
)
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class InvalidLesson(SparkError):
    """The text is not a valid lesson; ``message`` says where and what was expected."""

    status = 422
    code = "invalid_lesson"


@dataclass(frozen=True, slots=True)
class Attr:
    """One attribute: required or not, and what values it takes."""

    required: bool = False
    values: tuple[str, ...] = ()
    integer: tuple[int, int] | None = None
    id: bool = False
    nonempty: bool = False

    def problem(self, value: str) -> str | None:
        """Why ``value`` is not allowed, or ``None``."""
        if self.values and value not in self.values:
            return "must be one of " + ", ".join(f'"{v}"' for v in self.values)
        if self.integer is not None:
            low, high = self.integer
            if not value.isdigit() or not low <= int(value) <= high:
                return f"must be a whole number from {low} to {high}"
        if self.id and not _ID.match(value):
            return "must start with a letter and use only letters, digits, - and _ (at most 64)"
        if self.nonempty and not value.strip():
            return "must not be empty"
        return None


@dataclass(frozen=True, slots=True)
class Element:
    """What one element may hold.

    ``within``: the exercise types it may appear in (empty: anywhere it is allowed).
    """

    attrs: Mapping[str, Attr]
    children: tuple[str, ...] = ()
    text: bool = False
    within: tuple[str, ...] = ()


_INLINE = ("b", "i", "br")
_OPTIONAL_ID = {"id": Attr(id=True)}
_REQUIRED_ID = {"id": Attr(required=True, id=True)}
_MARKS = Attr(integer=(0, 100))

ELEMENTS: Mapping[str, Element] = {
    "lesson": Element({}, ("h1", "h2", "h3", "p", "ul", "ol", "exercise", "writing-area", "note")),
    "h1": Element(_OPTIONAL_ID, _INLINE, text=True),
    "h2": Element(_OPTIONAL_ID, _INLINE, text=True),
    "h3": Element(_OPTIONAL_ID, _INLINE, text=True),
    "p": Element(_OPTIONAL_ID, (*_INLINE, "blank"), text=True),
    "ul": Element(_OPTIONAL_ID, ("li",)),
    "ol": Element(_OPTIONAL_ID, ("li",)),
    "li": Element(_OPTIONAL_ID, (*_INLINE, "blank"), text=True),
    "b": Element({}, ("i", "br"), text=True),
    "i": Element({}, ("b", "br"), text=True),
    "br": Element({}),
    "note": Element({}, _INLINE, text=True),
    "writing-area": Element(
        {
            "id": Attr(id=True),
            "lines": Attr(integer=(1, 60)),
            "min-words": Attr(integer=(1, 5000)),
            "max-words": Attr(integer=(1, 5000)),
            "student-answer": Attr(),
        }
    ),
    "exercise": Element(
        {"id": Attr(required=True, id=True), "type": Attr(required=True, values=EXERCISE_TYPES)},
        (
            "h3",
            "p",
            "ul",
            "ol",
            "note",
            "question",
            "statement",
            "item",
            "prompt",
            "writing-area",
            "rubric",
        ),
    ),
    "blank": Element(
        {
            "id": Attr(id=True),
            "answer": Attr(required=True, nonempty=True),
            "alts": Attr(),
            "hint": Attr(),
            "student-answer": Attr(required=True),
        },
        within=("fill-blanks",),
    ),
    "question": Element(
        {**_REQUIRED_ID, "marks": _MARKS},
        ("prompt", "option", "model-answer", "writing-area", "note"),
        within=("multiple-choice", "short-answer"),
    ),
    "prompt": Element(
        {}, _INLINE, text=True, within=("multiple-choice", "short-answer", "writing")
    ),
    "option": Element(
        {"id": Attr(id=True), "correct": Attr(values=("true", "false"))},
        _INLINE,
        text=True,
        within=("multiple-choice",),
    ),
    "model-answer": Element({}, _INLINE, text=True, within=("short-answer",)),
    "statement": Element(
        {
            **_REQUIRED_ID,
            "answer": Attr(required=True, values=("true", "false")),
            "explanation": Attr(),
            "student-answer": Attr(values=("", "true", "false")),
        },
        _INLINE,
        text=True,
        within=("true-false",),
    ),
    "item": Element(
        {**_REQUIRED_ID, "order": Attr(required=True, integer=(1, 50))},
        _INLINE,
        text=True,
        within=("sequencing",),
    ),
    "rubric": Element({}, ("criterion",), within=("writing", "short-answer")),
    "criterion": Element(
        {"marks": Attr(required=True, integer=(0, 100))}, _INLINE, text=True, within=()
    ),
}


@dataclass(slots=True)
class Node:
    """One element of a parsed lesson."""

    tag: str
    attrs: dict[str, str]
    line: int
    children: list[Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # its own text pieces, in order
    text_line: int | None = None  # where its first non-blank text is

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def all_text(self) -> str:
        """Its text and its descendants', in document order (no markup)."""
        return " ".join(piece for node in self.walk() for piece in node.text)


@dataclass(frozen=True, slots=True)
class ParsedLesson:
    """A valid lesson: its root element, and the element ids with their tags and lines."""

    root: Node
    ids: Mapping[str, tuple[str, int]]

    def words(self) -> int:
        return len(self.root.all_text().split())


class _Located(ContentHandler):
    """A handler that knows the line the parser is at (for the errors)."""

    def __init__(self) -> None:
        super().__init__()
        self.locator: Locator | None = None

    def setDocumentLocator(self, locator: Locator) -> None:  # noqa: N802 (SAX's name)
        self.locator = locator

    def line(self) -> int:
        return (self.locator.getLineNumber() or 0) if self.locator is not None else 0


class _Builder(_Located):
    def __init__(self) -> None:
        super().__init__()
        self.root: Node | None = None
        self.stack: list[Node] = []

    def startElement(self, name: str, attrs: AttributesImpl) -> None:  # noqa: N802
        node = Node(name, dict(attrs.items()), self.line())
        if self.stack:
            self.stack[-1].children.append(node)
        else:
            self.root = node
        self.stack.append(node)
        if len(self.stack) > MAX_DEPTH:
            raise InvalidLesson(
                f"Line {node.line}: elements are nested more than {MAX_DEPTH} deep."
            )

    def endElement(self, name: str) -> None:  # noqa: N802
        self.stack.pop()

    def characters(self, content: str) -> None:
        if self.stack:
            node = self.stack[-1]
            node.text.append(content)
            if node.text_line is None and content.strip():
                node.text_line = self.line()


class _Blanks(_Located):
    """Counts ``<blank>`` elements, and those whose ``student-answer`` is not blank."""

    def __init__(self) -> None:
        super().__init__()
        self.blanks = 0
        self.answered = 0

    def startElement(self, name: str, attrs: AttributesImpl) -> None:  # noqa: N802
        if name == "blank":
            self.blanks += 1
            self.answered += bool(attrs.get("student-answer", "").strip())


def _run(text: str, handler: _Located) -> None:
    """Feed ``text`` to ``handler`` through the hardened parser.

    Raises:
        InvalidLesson: too long, not well-formed XML, or it declares a DTD or entities.
    """
    if len(text) > MAX_LESSON_CHARS:
        raise InvalidLesson(
            f"The lesson is {len(text):,} characters long; the most allowed is "
            f"{MAX_LESSON_CHARS:,}. Split it into several lessons."
        )
    # DTDs, entity declarations and external references are refused, not expanded.
    parser = create_parser(forbid_dtd=True, forbid_entities=True, forbid_external=True)
    parser.setContentHandler(handler)
    try:
        parser.parse(io.BytesIO(text.encode("utf-8")))
    except SAXParseException as exc:
        raise InvalidLesson(_parse_error(exc, text)) from None
    except DefusedXmlException:
        raise InvalidLesson(
            f"Line {handler.line()}: DTDs and entity declarations are not allowed in a "
            "lesson. Write characters as they are (é, –, “) or as &amp; &lt; &gt; &quot; &apos;."
        ) from None


def parse(text: str) -> Node:
    """The element tree of ``text``, parsed by a hardened parser.

    Raises:
        InvalidLesson: not well-formed XML, or it declares a DTD or entities.
    """
    builder = _Builder()
    _run(text, builder)
    assert builder.root is not None  # expat refuses a document with no element
    return builder.root


def blanks(text: str) -> tuple[int, int]:
    """The ``<blank>`` elements of ``text`` and how many carry a ``student-answer`` that is
    not blank, counted as the same hardened parser reads it, without building the tree
    (a quarter to a third of ``parse``'s time, and almost nothing to collect).

    Raises:
        InvalidLesson: as ``parse``.
    """
    counter = _Blanks()
    _run(text, counter)
    return counter.blanks, counter.answered


def _parse_error(exc: SAXParseException, text: str) -> str:
    message = exc.getMessage()
    where = f"Line {exc.getLineNumber()}, column {(exc.getColumnNumber() or 0) + 1}"
    if "undefined entity" in message:
        return (
            f"{where}: an undefined entity. Only &amp; &lt; &gt; &quot; &apos; exist; write "
            "other characters as they are (é, –, “, a non-breaking space)."
        )
    if "not well-formed" in message and "&" in text:
        return f"{where}: the XML is not well-formed (a bare & must be written &amp;)."
    return f"{where}: the XML is not well-formed ({message})."


def validate(text: str) -> ParsedLesson:
    """``text`` as a valid lesson.

    Raises:
        InvalidLesson: the first problem found, with its line and what was expected.
    """
    root = parse(text)
    if root.tag != "lesson":
        raise InvalidLesson(
            f"Line {root.line}: the root element must be <lesson>, not <{root.tag}>."
        )
    ids: dict[str, tuple[str, int]] = {}
    _check(root, None, None, ids)
    return ParsedLesson(root, ids)


def _names(tags: tuple[str, ...]) -> str:
    return ", ".join(f"<{t}>" for t in tags)


def _check(node: Node, parent: Node | None, exercise: str | None, ids: dict[str, Any]) -> None:
    spec = ELEMENTS.get(node.tag)
    if spec is None:
        raise InvalidLesson(
            f"Line {node.line}: <{node.tag}> is not part of the lesson grammar. "
            f"The elements are: {_names(tuple(ELEMENTS))}."
        )
    if parent is not None:
        allowed = ELEMENTS[parent.tag].children
        if node.tag not in allowed:
            holds = ("text, " if ELEMENTS[parent.tag].text else "") + (_names(allowed) or "nothing")
            raise InvalidLesson(
                f"Line {node.line}: <{node.tag}> cannot go inside <{parent.tag}>. "
                f"<{parent.tag}> may contain {holds}."
            )
    if spec.within and exercise not in spec.within:
        kinds = ", ".join(f'"{t}"' for t in spec.within)
        raise InvalidLesson(
            f"Line {node.line}: <{node.tag}> belongs only in an <exercise> of type {kinds}"
            + (f', not "{exercise}".' if exercise else ".")
        )
    _check_attrs(node, spec)
    if not spec.text and node.text_line is not None:
        raise InvalidLesson(
            f"Line {node.text_line}: text cannot go directly inside <{node.tag}>; "
            f"it may contain {_names(spec.children) or 'nothing'}."
        )
    if "id" in node.attrs:
        ident = node.attrs["id"]
        if ident in ids:
            first = ids[ident][1]
            raise InvalidLesson(
                f'Line {node.line}: the id "{ident}" is already used on line {first}; '
                "every id must be unique."
            )
        ids[ident] = (node.tag, node.line)
    if node.tag == "exercise":
        exercise = node.attrs["type"]
    for child in node.children:
        _check(child, node, exercise, ids)
    if node.tag == "writing-area":
        low, high = node.attrs.get("min-words"), node.attrs.get("max-words")
        if low and high and int(low) > int(high):
            raise InvalidLesson(
                f"Line {node.line}: <writing-area> has min-words {low} above max-words {high}."
            )
    if node.tag == "exercise":
        _check_exercise(node, exercise or "")
    elif node.tag == "question":
        _check_question(node, exercise or "")


def _check_attrs(node: Node, spec: Element) -> None:
    for name, value in node.attrs.items():
        attr = spec.attrs.get(name)
        if attr is None:
            known = ", ".join(spec.attrs) or "none"
            raise InvalidLesson(
                f"Line {node.line}: <{node.tag}> has no attribute {name!r}. "
                f"Its attributes: {known}."
            )
        problem = attr.problem(value)
        if problem is not None:
            raise InvalidLesson(
                f'Line {node.line}: <{node.tag} {name}="{value}">: {name} {problem}.'
            )
    for name, attr in spec.attrs.items():
        if attr.required and name not in node.attrs:
            hint = ' (use student-answer="" for a new one)' if name == "student-answer" else ""
            raise InvalidLesson(f"Line {node.line}: <{node.tag}> needs the attribute {name}{hint}.")


def _count(node: Node, tag: str) -> int:
    return sum(1 for n in node.walk() if n.tag == tag)


_NEEDS = {
    "fill-blanks": ("blank", 1),
    "multiple-choice": ("question", 1),
    "true-false": ("statement", 1),
    "sequencing": ("item", 2),
    "short-answer": ("question", 1),
    "writing": ("writing-area", 1),
}


def _check_exercise(node: Node, kind: str) -> None:
    tag, least = _NEEDS[kind]
    if _count(node, tag) < least:
        raise InvalidLesson(
            f'Line {node.line}: an <exercise type="{kind}"> needs at least {least} <{tag}>'
            + (" elements." if least > 1 else ".")
        )
    if kind == "sequencing":
        items = [c for c in node.children if c.tag == "item"]
        orders = sorted(int(c.attrs["order"]) for c in items)
        if orders != list(range(1, len(items) + 1)):
            raise InvalidLesson(
                f"Line {node.line}: the order attributes of a sequencing exercise's "
                f"{len(items)} items must be 1 to {len(items)}, each once; found "
                f"{', '.join(map(str, orders))}."
            )
    if kind == "writing" and not any(c.tag == "prompt" for c in node.children):
        raise InvalidLesson(f'Line {node.line}: an <exercise type="writing"> needs a <prompt>.')


def _check_question(node: Node, kind: str) -> None:
    prompts = [c for c in node.children if c.tag == "prompt"]
    if len(prompts) != 1:
        raise InvalidLesson(f"Line {node.line}: a <question> needs exactly one <prompt>.")
    if kind == "multiple-choice":
        options = [c for c in node.children if c.tag == "option"]
        if not 2 <= len(options) <= 6:
            raise InvalidLesson(
                f"Line {node.line}: a multiple-choice <question> needs 2 to 6 <option> "
                f"elements; it has {len(options)}."
            )
        if not any(o.attrs.get("correct") == "true" for o in options):
            raise InvalidLesson(
                f'Line {node.line}: mark the right answer with <option correct="true">.'
            )
    elif any(c.tag == "option" for c in node.children):  # pragma: no cover (``within``)
        raise InvalidLesson(f"Line {node.line}: only multiple-choice questions have options.")


def renamed_ids(before: ParsedLesson, after: ParsedLesson) -> list[str]:
    """Ids an edit changed rather than removed: an element's id vanished while a new id
    appeared on an element of the same kind. Each is described for the model."""
    gone = {i: t for i, t in before.ids.items() if i not in after.ids}
    new = {i: t for i, t in after.ids.items() if i not in before.ids}
    problems = []
    for old_id, (tag, line) in gone.items():
        twin = next((i for i, (t, _) in new.items() if t == tag), None)
        if twin is not None:
            problems.append(f'<{tag} id="{old_id}"> (line {line}) would become id="{twin}"')
            new.pop(twin)
    return problems
