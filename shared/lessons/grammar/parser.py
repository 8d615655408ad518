"""A lesson's text parsed by a hardened parser (``defusedxml``: a DTD, an entity
declaration or an external reference is refused before anything is expanded) into its
element tree, or its blanks counted without building one."""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from xml.sax import SAXParseException
from xml.sax.handler import ContentHandler
from xml.sax.xmlreader import AttributesImpl, Locator

from defusedxml import DefusedXmlException
from defusedxml.expatreader import create_parser

from shared.errors import SparkError
from shared.lessons.grammar.elements import MAX_DEPTH, MAX_LESSON_CHARS


class InvalidLesson(SparkError):
    """The text is not a valid lesson; ``message`` says where and what was expected."""

    status = 422
    code = "invalid_lesson"


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
