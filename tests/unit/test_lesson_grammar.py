"""The lesson XML grammar: what it accepts, the errors it gives, and the attacks it refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.lessons.grammar import (
    MAX_LESSON_CHARS,
    InvalidLesson,
    blanks,
    parse,
    renamed_ids,
    validate,
)

SKILLS = Path(__file__).resolve().parents[2] / "prompts" / "skills"

LESSON = """<lesson>
<h1>Les verbes — être et avoir</h1>
<p>Un <b>petit</b> rappel, avec des <i>accents</i> : é, è, ç &amp; “guillemets”.</p>
<ul>
<li>être</li>
</ul>
<note>Allow ten minutes.</note>
<exercise id="ex-1" type="fill-blanks">
<h3>Complétez.</h3>
<p>Je <blank answer="suis" alts="suis bien" hint="être" student-answer=""/> content.</p>
</exercise>
<writing-area id="wa-1" lines="5" min-words="20" max-words="40" student-answer=""/>
</lesson>"""


def _examples() -> list[tuple[str, str]]:
    found = []
    for path in sorted(SKILLS.glob("*.md")):
        for example in re.findall(r"```xml\n(.*?)```", path.read_text(), re.S):
            found.append((path.stem, example))
    return found


def test_a_lesson_using_every_common_element_is_valid() -> None:
    lesson = validate(LESSON)
    assert lesson.ids == {"ex-1": ("exercise", 8), "wa-1": ("writing-area", 12)}
    assert lesson.words() > 10


@pytest.mark.parametrize(("skill", "example"), _examples(), ids=lambda v: v[:20])
def test_every_example_in_a_skill_is_a_valid_lesson(skill: str, example: str) -> None:
    validate(f"<lesson>\n{example}</lesson>")


@pytest.mark.parametrize(("skill", "example"), _examples(), ids=lambda v: v[:20])
def test_blanks_counts_what_the_tree_holds(skill: str, example: str) -> None:
    """``blanks`` (the progress summaries' count, no tree built) says what the tree says."""
    text = f"<lesson>\n{example}</lesson>"
    found = [n for n in parse(text).walk() if n.tag == "blank"]
    answered = sum(bool(n.attrs.get("student-answer", "").strip()) for n in found)
    assert blanks(text) == (len(found), answered)
    with pytest.raises(InvalidLesson):
        blanks(text[:-3])  # refused as a parse refuses it


def test_the_six_exercise_skills_each_teach_their_xml() -> None:
    taught = {skill for skill, _ in _examples()}
    assert {
        "fill-blanks",
        "multiple-choice",
        "true-false",
        "sequencing",
        "short-answer",
        "writing-exercises",
    } <= taught


@pytest.mark.parametrize(
    ("xml", "expected"),
    [
        ("<lesson>\n<p>open\n</lesson>", "Line 3, column 3: the XML is not well-formed"),
        ("<doc/>", "Line 1: the root element must be <lesson>, not <doc>."),
        ("<lesson>\n<div/></lesson>", "Line 2: <div> is not part of the lesson grammar."),
        (
            "<lesson>\n<p>\n<option>x</option></p></lesson>",
            "Line 3: <option> cannot go inside <p>. <p> may contain text, <b>, <i>, <br>, <blank>.",
        ),
        ("<lesson>hello</lesson>", "Line 1: text cannot go directly inside <lesson>"),
        (
            '<lesson>\n<exercise id="e1" type="puzzle"><p>x</p></exercise></lesson>',
            '<exercise type="puzzle">: type must be one of "fill-blanks"',
        ),
        (
            '<lesson>\n<exercise type="true-false"/></lesson>',
            "Line 2: <exercise> needs the attribute id.",
        ),
        (
            '<lesson>\n<exercise id="1x" type="true-false"/></lesson>',
            'id="1x">: id must start with a letter',
        ),
        (
            '<lesson><exercise id="e" type="fill-blanks">\n<p>Je <blank answer="suis"/></p>'
            "</exercise></lesson>",
            'Line 2: <blank> needs the attribute student-answer (use student-answer="" for a '
            "new one).",
        ),
        (
            '<lesson><p>a <blank answer="x" student-answer=""/></p></lesson>',
            '<blank> belongs only in an <exercise> of type "fill-blanks".',
        ),
        (
            '<lesson>\n<exercise id="e" type="true-false"><p>no statements</p></exercise></lesson>',
            'Line 2: an <exercise type="true-false"> needs at least 1 <statement>.',
        ),
        (
            '<lesson><exercise id="e" type="multiple-choice">\n<question id="q">'
            "<prompt>?</prompt><option>a</option><option>b</option></question>"
            "</exercise></lesson>",
            'Line 2: mark the right answer with <option correct="true">.',
        ),
        (
            '<lesson><exercise id="e" type="multiple-choice"><question id="q">'
            '<prompt>?</prompt><option correct="true">a</option></question>'
            "</exercise></lesson>",
            "needs 2 to 6 <option> elements; it has 1.",
        ),
        (
            '<lesson><exercise id="e" type="sequencing"><item id="a" order="1">x</item>'
            '<item id="b" order="1">y</item></exercise></lesson>',
            "must be 1 to 2, each once; found 1, 1.",
        ),
        (
            '<lesson>\n<p id="a">x</p>\n<p id="a">y</p></lesson>',
            'Line 3: the id "a" is already used on line 2',
        ),
        (
            '<lesson><writing-area lines="x"/></lesson>',
            "lines must be a whole number from 1 to 60.",
        ),
        (
            '<lesson><writing-area min-words="50" max-words="10"/></lesson>',
            "min-words 50 above max-words 10",
        ),
        ("<lesson><p>caf&eacute;</p></lesson>", "an undefined entity"),
        ("<lesson><p>fish & chips</p></lesson>", "a bare & must be written &amp;"),
        ("", "the XML is not well-formed"),
        ('<lesson><p colour="red">x</p></lesson>', "<p> has no attribute 'colour'"),
    ],
)
def test_an_invalid_lesson_gets_an_error_the_model_can_act_on(xml: str, expected: str) -> None:
    with pytest.raises(InvalidLesson) as caught:
        validate(xml)
    assert expected in caught.value.message


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lesson [
<!ENTITY lol "lol">
<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
<!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
<!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
<!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
<!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
<!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<lesson><p>&lol9;</p></lesson>"""

ATTACKS = {
    "entity expansion (billion laughs)": BILLION_LAUGHS,
    "external entity": (
        '<!DOCTYPE lesson [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><lesson><p>&xxe;</p></lesson>'
    ),
    "external DTD": '<!DOCTYPE lesson SYSTEM "http://127.0.0.1:9/evil.dtd"><lesson/>',
    "parameter entity": (
        '<!DOCTYPE lesson [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]><lesson/>'
    ),
    "internal DTD alone": "<!DOCTYPE lesson [<!ELEMENT lesson ANY>]><lesson/>",
}


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=list(ATTACKS))
def test_dtds_and_entities_are_refused_before_anything_expands(attack: str) -> None:
    # Refused for its declarations, not for what they expanded to (a billion laughs
    # would have to expand before any other rule could refuse it).
    with pytest.raises(InvalidLesson) as caught:
        validate(attack)
    assert "DTDs and entity declarations are not allowed" in caught.value.message
    assert "root:" not in caught.value.message  # nothing of /etc/passwd leaked


def test_size_and_depth_are_bounded() -> None:
    with pytest.raises(InvalidLesson, match="characters long"):
        validate("<lesson>" + "<p>x</p>" * (MAX_LESSON_CHARS // 8) + "</lesson>")
    deep = "<lesson>" + "<p>" + "<b><i>" * 10 + "x" + "</i></b>" * 10 + "</p></lesson>"
    with pytest.raises(InvalidLesson, match="nested more than"):
        validate(deep)


def test_an_edit_that_renames_an_id_is_caught_and_one_that_removes_an_element_is_not() -> None:
    before = validate(LESSON)
    renamed = validate(LESSON.replace('id="ex-1"', 'id="ex-9"'))
    assert renamed_ids(before, renamed) == ['<exercise id="ex-1"> (line 8) would become id="ex-9"']
    removed = LESSON.replace(
        '<writing-area id="wa-1" lines="5" min-words="20" max-words="40" student-answer=""/>\n', ""
    )
    assert renamed_ids(before, validate(removed)) == []
