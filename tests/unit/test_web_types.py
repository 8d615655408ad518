"""The web client's type check (``make webcheck``, ``tools/webtypes.py``): tsc passes on
the client as it is, and fails on one that reads a field its schema (a document's, or an
SSE event's) lacks, naming it;
and the client's modules stay small.

Each test checks a copy of ``web/`` (beside a link to this clone's ``node_modules``, which
``make setup`` installs from ``package-lock.json``), with its types generated afresh from
``schemas/``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tools import webtypes

ROOT = Path(__file__).resolve().parents[2]


def _copy(tmp_path: Path) -> Path:
    web = tmp_path / "web"
    shutil.copytree(ROOT / "web", web, ignore=shutil.ignore_patterns("dist", "generated"))
    (tmp_path / "node_modules").symlink_to(ROOT / "node_modules")
    return web


def test_web_types_the_client_passes(tmp_path: Path) -> None:
    checked = webtypes.check(_copy(tmp_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_web_types_a_field_the_schema_lacks_fails(tmp_path: Path) -> None:
    web = _copy(tmp_path)
    render = web / "src" / "views" / "render.ts"
    source = render.read_text(encoding="utf-8")
    anchor = "  const text = textOf(message);\n"
    assert anchor in source
    # A message's spoken text: no schema in schemas/ names it.
    read = "  if (message.spokenText) article.title = message.spokenText;\n"
    render.write_text(source.replace(anchor, anchor + read), encoding="utf-8")
    checked = webtypes.check(web)
    assert checked.returncode != 0
    assert "Property 'spokenText' does not exist on type 'Message'" in checked.stdout, (
        checked.stdout
    )


def test_web_types_an_event_field_the_schema_lacks_fails(tmp_path: Path) -> None:
    web = _copy(tmp_path)
    voice = web / "src" / "voice.ts"
    source = voice.read_text(encoding="utf-8")
    read = "const id = event.conversationId;"
    assert read in source
    # The name the event has in Python: on the wire (schemas/events.schema.json) it is camelCase.
    voice.write_text(source.replace(read, "const id = event.conversation_id;"), encoding="utf-8")
    checked = webtypes.check(web)
    assert checked.returncode != 0
    assert "Property 'conversation_id' does not exist on type 'RunStartEvent'" in checked.stdout, (
        checked.stdout
    )


def test_web_types_follow_the_schemas() -> None:
    # The generated types are the schemas': a document's fields, and not the titles
    # pydantic gives each field, nor an index signature that would let any name through.
    conversation = webtypes.for_reader(
        {
            "title": "Conversation",
            "type": "object",
            "additionalProperties": True,
            "properties": {
                "title": {"title": "Title", "type": "string"},
                "updatedAt": {"title": "Timestamp", "type": "object", "properties": {}},
            },
        }
    )
    assert conversation["title"] == "Conversation"
    assert conversation["additionalProperties"] is False
    assert conversation["properties"]["title"] == {"type": "string"}
    assert conversation["properties"]["updatedAt"] == {"$ref": "#/$defs/Timestamp"}
    assert conversation["$defs"]["Timestamp"]["additionalProperties"] is False


def test_web_modules_stay_under_400_lines() -> None:
    sources = sorted((ROOT / "web" / "src").rglob("*.ts"))
    assert sources
    long = {
        str(path.relative_to(ROOT)): n
        for path in sources
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert not long, f"split these by concern: {long}"
