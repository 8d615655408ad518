"""A parsed lesson checked against the grammar, each problem written for the model to fix
(its line, the element, what was expected), and the ids an edit would rename."""

from __future__ import annotations

from typing import Any

from shared.lessons.grammar.elements import ELEMENTS, Element
from shared.lessons.grammar.parser import InvalidLesson, Node, ParsedLesson, parse


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
