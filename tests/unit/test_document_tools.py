"""The document tools on their edge cases, over the in-memory lesson store."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.clock import SystemClock
from shared.errors import ToolError
from shared.lessons.grammar import validate
from shared.llm.base import ToolCallRequest
from shared.schemas.documents import Lesson
from shared.store.memory import InMemoryLessonStore
from shared.tools.base import ToolContext, ToolOutput, ToolRegistry
from shared.tools.documents import NO_DOCUMENT, document_tools

NOW = datetime(2026, 11, 22, tzinfo=UTC)
BODY = """<lesson>
<h1>Les verbes</h1>
<p>Être et avoir — the two French verbs we meet first.</p>
<exercise id="ex-1" type="fill-blanks">
<h3>Complete the sentences.</h3>
<p>Je <blank answer="suis" student-answer=""/> content.</p>
<p>Tu <blank answer="es" student-answer=""/> content.</p>
</exercise>
</lesson>"""


def lesson(body: str = BODY, version: int = 1) -> Lesson:
    return Lesson(
        id="les_1", title="Les verbes", body=body, version=version, created_at=NOW, updated_at=NOW
    )


class Tools:
    def __init__(self, store: InMemoryLessonStore) -> None:
        self.store = store
        self.registry = ToolRegistry(document_tools(store, SystemClock()))

    async def call(self, name: str, document: str | None = "les_1", **args: Any) -> ToolOutput:
        parsed = self.registry.parse(ToolCallRequest("c1", name, json.dumps(args)))
        return await parsed.run(ToolContext("alice", "conv_1", "c1", document))

    async def text(self, name: str, **args: Any) -> str:
        value = (await self.call(name, **args)).value
        assert isinstance(value, str)
        return value


@pytest.fixture
async def tools() -> Tools:
    store = InMemoryLessonStore()
    await store.create("alice", lesson())
    return Tools(store)


async def test_read_numbers_lines_under_a_header(tools: Tools) -> None:
    text = await tools.text("read_document")
    head, _, body = text.partition("\n---\n")
    assert head == 'Lesson: "Les verbes" (9 lines, 20 words, version 1)'
    assert body.splitlines()[0] == "1: <lesson>"
    assert body.splitlines()[2] == "3: <p>Être et avoir — the two French verbs we meet first.</p>"
    assert len(body.splitlines()) == 9


async def test_read_a_range_and_ranges_out_of_bounds(tools: Tools) -> None:
    text = await tools.text("read_document", start_line=2, end_line=3)
    assert text.split("\n---\n")[1] == (
        "2: <h1>Les verbes</h1>\n3: <p>Être et avoir — the two French verbs we meet first.</p>"
    )
    tail = await tools.text("read_document", start_line=8, end_line=500)
    assert tail.split("\n---\n")[1] == "8: </exercise>\n9: </lesson>"
    with pytest.raises(ToolError, match="has 9 lines; start_line 10 is past the end"):
        await tools.call("read_document", start_line=10)
    with pytest.raises(ToolError, match=r"end_line \(2\) is before start_line \(3\)"):
        await tools.call("read_document", start_line=3, end_line=2)
    with pytest.raises(ToolError, match="Invalid arguments for read_document: start_line"):
        await tools.call("read_document", start_line=0)


async def test_a_long_lesson_is_cut_with_a_note_to_read_on(tools: Tools) -> None:
    rows = "\n".join(f"<p>Line {i} {'é' * 60}</p>" for i in range(400))
    await tools.store.replace("alice", lesson(f"<lesson>\n{rows}\n</lesson>", 2), 1)
    text = await tools.text("read_document")
    assert len(text) < 7_500
    last = text.splitlines()[-1]
    assert last.startswith("… (output cut at line ") and "read the rest with start_line=" in last


async def test_an_empty_lesson_reads_and_searches_as_empty(tools: Tools) -> None:
    await tools.store.replace("alice", lesson("<lesson/>", 2), 1)
    assert (await tools.text("read_document")).endswith("---\n1: <lesson/>")
    info = (await tools.call("get_document_info")).value
    assert info == {
        "documentId": "les_1",
        "title": "Les verbes",
        "lines": 1,
        "words": 0,
        "characters": 9,
        "version": 2,
    }
    assert await tools.text("search_document", query="verbe") == (
        'No line matches the text "verbe".'
    )


async def test_search_is_case_insensitive_with_context_either_side(tools: Tools) -> None:
    text = await tools.text("search_document", query="CONTENT")
    assert text.startswith('2 lines match the text "CONTENT":')
    assert "5: <h3>Complete the sentences.</h3>\n6: > <p>Je" in text
    assert "7: > <p>Tu" in text and "8: </exercise>" in text
    assert (await tools.text("search_document", query="CONTENT", case_sensitive=True)).startswith(
        "No line"
    )
    first = await tools.text("search_document", query="lesson")
    assert "1: > <lesson>\n2: <h1>" in first  # no line before the first
    assert "8: </exercise>\n9: > </lesson>" in first  # none after the last


async def test_search_by_regex_and_unicode(tools: Tools) -> None:
    text = await tools.text("search_document", query=r"answer=\"(suis|es)\"", is_regex=True)
    assert text.startswith('2 lines match the pattern "answer=\\"(suis|es)\\""')
    assert (await tools.text("search_document", query="ÊTRE")).startswith("1 line match")
    literal = await tools.text("search_document", query="(suis|es)")
    assert literal.startswith("No line")  # a literal unless is_regex


async def test_search_shows_twenty_of_many_matches(tools: Tools) -> None:
    rows = "\n".join(f"<p>verb {i}</p>" for i in range(30))
    await tools.store.replace("alice", lesson(f"<lesson>\n{rows}\n</lesson>", 2), 1)
    text = await tools.text("search_document", query="verb")
    assert text.startswith('30 lines match the text "verb"; the first 20 are shown')
    assert text.count("> <p>verb") == 20


@pytest.mark.parametrize(
    ("pattern", "why"),
    [("(a", "missing )"), (r"(a)\1", "invalid escape"), ("(?=a)", "invalid perl operator")],
)
async def test_a_bad_pattern_is_a_clear_error(tools: Tools, pattern: str, why: str) -> None:
    with pytest.raises(ToolError) as caught:
        await tools.call("search_document", query=pattern, is_regex=True)
    assert why in caught.value.message
    assert "Back-references and look-arounds are not supported" in caught.value.message


async def test_a_catastrophic_pattern_on_ten_thousand_lines_returns(tools: Tools) -> None:
    # Each line is 60 a's and a "!": a backtracking engine takes about 2**60 steps on
    # either pattern, for one line, and would never return; RE2 reads each line once.
    # How long RE2 takes is a benchmark's question, not this test's.
    rows = "\n".join("<p>" + "a" * 60 + "!</p>" for _ in range(10_000))
    await tools.store.replace("alice", lesson(f"<lesson>\n{rows}\n</lesson>", 2), 1)
    text = await tools.text("search_document", query="(a+)+$", is_regex=True)
    assert text.startswith("No line")
    none = await tools.text("search_document", query="^(a|a)*b$", is_regex=True)
    assert none.startswith("No line")


async def test_edit_replaces_the_first_occurrence_and_bumps_the_version(tools: Tools) -> None:
    out = await tools.call("edit_document", find=" content.</p>", replace=" heureux.</p>")
    assert out.change is not None and (out.change.document_id, out.change.version) == ("les_1", 2)
    assert out.value["result"] == (
        "Replaced the first occurrence, at line 6; the lesson is now version 2. "
        "1 more occurrence left as they were."
    )
    stored = await tools.store.get("alice", "les_1")
    assert stored is not None and stored.version == 2
    assert 'Je <blank answer="suis" student-answer=""/> heureux.</p>' in stored.body
    assert 'Tu <blank answer="es" student-answer=""/> content.</p>' in stored.body
    validate(stored.body)


async def test_edit_with_unicode_and_markup(tools: Tools) -> None:
    out = await tools.call(
        "edit_document",
        find="Être et avoir — the two",
        replace="<b>Être</b> et <i>avoir</i> — “the” two",
    )
    assert out.value["version"] == 2
    stored = await tools.store.get("alice", "les_1")
    assert stored is not None and "<b>Être</b> et <i>avoir</i> — “the” two" in stored.body


async def test_an_edit_that_finds_nothing_suggests_a_search(tools: Tools) -> None:
    with pytest.raises(ToolError) as caught:
        await tools.call("edit_document", find="je suis", replace="x")  # wrong case
    assert caught.value.message.startswith('Text not found: "je suis".')
    assert "Use search_document" in caught.value.message
    assert (await tools.store.get("alice", "les_1")) == lesson()


@pytest.mark.parametrize(
    ("find", "replace", "why"),
    [
        ("<h1>Les verbes</h1>", "<h1>Les verbes", "lesson. Line 9, column 3: the XML is not well"),
        (' student-answer=""/> content', "/> content", "Line 6: <blank> needs the attribute stu"),
        ("<h3>Complete the sentences.</h3>", "<h4>Complete</h4>", "Line 5: <h4> is not part of"),
        ('id="ex-1"', 'id="ex-2"', '<exercise id="ex-1"> (line 4) would become id="ex-2"'),
    ],
)
async def test_an_edit_that_breaks_the_lesson_or_its_ids_is_refused(
    tools: Tools, find: str, replace: str, why: str
) -> None:
    with pytest.raises(ToolError) as caught:
        await tools.call("edit_document", find=find, replace=replace)
    assert caught.value.message.startswith("The edit was not made")
    assert why in caught.value.message
    assert (await tools.store.get("alice", "les_1")) == lesson()


async def test_an_edit_against_a_stale_version_is_refused_and_nothing_is_lost(
    tools: Tools,
) -> None:
    await tools.call("edit_document", find="Les verbes", replace="Verbs", version=1)
    with pytest.raises(ToolError, match=r"changed since version 1 \(it is now version 2\)"):
        await tools.call("edit_document", find="Être", replace="Etre", version=1)
    stored = await tools.store.get("alice", "les_1")
    assert stored is not None and stored.version == 2 and "Être" in stored.body


async def test_two_edits_at_once_never_lose_one(tools: Tools) -> None:
    """Both read version 1; the store writes one and refuses the other, which is told."""
    store = tools.store
    real_get = store.get
    both_read = asyncio.Barrier(2)

    async def get_together(user_id: str, lesson_id: str) -> Lesson | None:
        found = await real_get(user_id, lesson_id)
        await both_read.wait()
        return found

    store.get = get_together  # type: ignore[method-assign]
    results = await asyncio.gather(
        tools.call("edit_document", find="Je ", replace="Moi, je "),
        tools.call("edit_document", find="Tu ", replace="Toi, tu "),
        return_exceptions=True,
    )
    store.get = real_get  # type: ignore[method-assign]
    refused = [r for r in results if isinstance(r, ToolError)]
    assert len(refused) == 1 and "nothing was changed" in refused[0].message
    stored = await store.get("alice", "les_1")
    assert stored is not None and stored.version == 2
    assert ("Moi, je " in stored.body) != ("Toi, tu " in stored.body)


async def test_without_an_open_lesson_the_tools_say_how_to_get_one(tools: Tools) -> None:
    for name in ("read_document", "get_document_info"):
        with pytest.raises(ToolError) as caught:
            await tools.call(name, document=None)
        assert caught.value.message == NO_DOCUMENT
    await tools.store.delete("alice", "les_1")
    with pytest.raises(ToolError, match="no longer exists"):
        await tools.call("search_document", query="x")


async def test_another_users_lesson_is_never_reached(tools: Tools) -> None:
    parsed = tools.registry.parse(ToolCallRequest("c1", "read_document", "{}"))
    with pytest.raises(ToolError, match="no longer exists"):
        await parsed.run(ToolContext("mallory", "conv_9", "c1", "les_1"))
