"""The docs site's generated parts (tools/docs.py) and the benchmarks' results file
(bench/results.py): each page changes when its source does, with no hand edit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import results
from shared.agent.stream.events import ToolStartEvent
from shared.agent.stream.sse import event_data
from tools import docs
from tools.eventschema import EVENTS_PATH

ROOT = Path(__file__).resolve().parents[2]


def test_a_marker_is_replaced_by_its_generated_part() -> None:
    page = "# Configuration\n\n<!-- generated: settings -->\n\nAfter.\n"
    filled = docs.fill(page)
    assert "<!-- generated" not in filled
    assert "| `SPARK_MODEL` | `gpt-4o-mini` |" in filled
    assert filled.endswith("\n\nAfter.\n")


def test_a_misspelt_marker_fails_the_build() -> None:
    with pytest.raises(KeyError):
        docs.fill("<!-- generated: setings -->\n")


def test_every_marker_in_the_docs_names_a_generator() -> None:
    found = set()
    for page in sorted((ROOT / "docs").rglob("*.md")):
        found |= set(docs._MARKER.findall(page.read_text(encoding="utf-8")))
    assert found == set(docs.GENERATORS)


def test_the_documents_page_follows_the_schemas(tmp_path: Path) -> None:
    schema = {
        "title": "Widget",
        "description": "A ``widget``.",
        "properties": {"size": {"type": "integer", "description": "How big"}},
        "required": ["size"],
        "$defs": {"Part": {"properties": {"of": {"$ref": "#/$defs/Widget"}}}},
    }
    (tmp_path / "widget.schema.json").write_text(json.dumps(schema))
    page = docs.document_schemas(tmp_path)
    assert "## Widget (`schemas/widget.schema.json`)" in page
    assert "A `widget`." in page
    assert "| `size` | integer | yes | How big |" in page
    assert "### Part" in page and "[Widget](#widget)" in page


def test_every_schema_in_the_repository_is_on_the_documents_page() -> None:
    page = docs.document_schemas()
    for path in sorted((ROOT / "schemas").glob("*.schema.json")):
        if path != EVENTS_PATH:  # not a document: the API page's events (below)
            assert f"`schemas/{path.name}`" in page
    assert "`schemas/events.schema.json`" not in page


def test_the_sse_events_are_listed_with_their_wire_fields() -> None:
    page = docs.sse_events()
    for kind in ("run_start", "text", "tool_start", "question", "done", "error"):
        assert f"### `{kind}`" in page
    assert "`usage`" not in page  # folded by the reducer, never sent
    sent = event_data(ToolStartEvent(id="c", tool="t", args={}, display_text="d"))
    section = page.split("### `tool_start`")[1].split("###")[0]
    for name in sent:
        if name != "type":
            assert f"`{name}`" in section
    assert "argsJson" not in section  # kept for the reducer, not sent


def test_the_sse_events_follow_their_schema(tmp_path: Path) -> None:
    schema = json.loads(EVENTS_PATH.read_text(encoding="utf-8"))
    done = schema["$defs"]["DoneEvent"]
    done["properties"]["replyId"] = done["properties"].pop("messageId")
    path = tmp_path / "events.schema.json"
    path.write_text(json.dumps(schema))
    section = docs.sse_events(path).split("### `done`")[1].split("###")[0]
    assert "| `replyId` | string |" in section
    assert "messageId" not in section
    assert "`type`" not in section  # the frame's event line, not a field of its data


def test_the_benchmarks_page_says_when_no_results_are_committed(tmp_path: Path) -> None:
    assert "No results are committed yet" in docs.benchmarks(tmp_path / "results.json")


def test_a_benchmark_run_is_recorded_with_its_machine_and_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "results.json"
    monkeypatch.setattr(sys, "argv", ["bench/rollover.py"])
    with results.recorded("rollover", path):
        print("(a) 10,000 vs 10: 1.2x CPU")
    assert "1.2x CPU" in capsys.readouterr().out  # still printed
    run = json.loads(path.read_text())["rollover"]
    assert run["report"] == "(a) 10,000 vs 10: 1.2x CPU\n"
    assert run["machine"]["cpus"] and run["date"] and run["commit"]
    page = docs.benchmarks(path)
    assert "## `bench/rollover.py`" in page and "1.2x CPU" in page
    assert f"{run['machine']['cpus']} CPUs" in page


def test_a_partial_benchmark_run_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.json"
    monkeypatch.setattr(sys, "argv", ["bench/stream_overhead.py", "--only", "c"])
    with results.recorded("stream_overhead", path):
        print("part of it")
    assert not path.exists()


def test_a_benchmarks_targets_are_printed_kept_and_tabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "results.json"
    monkeypatch.setattr(sys, "argv", ["bench/stream_overhead.py"])
    with results.recorded("stream_overhead", path):
        results.target("streams held", "650", ">= 600", True, "floor 1000")
        results.target("added TTFT", "1.4 ms", "<= 1.0 ms", False)
    out = capsys.readouterr().out
    assert "streams held: 650 (target >= 600: met); floor 1000" in out
    assert "added TTFT: 1.4 ms (target <= 1.0 ms: not met)" in out
    kept = json.loads(path.read_text())["stream_overhead"]["targets"]
    assert [t["met"] for t in kept] == [True, False]
    page = docs.benchmarks(path)
    assert "| streams held | 650 | >= 600 | met | floor 1000 | `stream_overhead` |" in page
    assert "| added TTFT | 1.4 ms | <= 1.0 ms | **not met** |" in page
