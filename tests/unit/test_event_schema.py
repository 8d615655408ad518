"""The SSE events' JSON Schema (``schemas/events.schema.json``, ``tools/eventschema.py``):
every frame the serialiser writes, of every event a client is sent, is valid against
the committed schema, and the schema refuses a frame the client could not read."""

from __future__ import annotations

import json
import typing
from dataclasses import fields
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.agent.stream.events import UNSENT, AgentEvent, RunStartEvent, TextEvent, ToolEndEvent
from shared.agent.stream.sse import encode
from shared.agent.stream.transcript import Frame
from tools import eventschema

SCHEMA = json.loads(eventschema.EVENTS_PATH.read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

# What JSON carries, for the fields whose values are the model's own (a tool's arguments,
# a question's options): hypothesis cannot make an ``Any``.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_OBJECT = st.dictionaries(st.text(), _JSON, max_size=4)
_FREE: dict[Any, st.SearchStrategy[Any]] = {
    dict[str, Any]: _OBJECT,
    list[dict[str, Any]]: st.lists(_OBJECT, max_size=3),
}


def _instances(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` with every field drawn, optional ones ``None`` or not."""
    hints = typing.get_type_hints(cls)
    drawn = {f.name: _FREE.get(hints[f.name], ...) for f in fields(cls) if f.name != "type"}
    return st.builds(cls, **drawn)


def _sent(event: Any) -> dict[str, Any]:
    """The frame ``encode`` writes, read back as the client reads it: its ``data:`` JSON
    with its ``event:`` line as ``type``."""
    lines = dict(
        line.split(": ", 1) for line in encode(Frame("r:0:0", event)).decode().split("\n") if line
    )
    return {**json.loads(lines["data"]), "type": lines["event"]}


def test_event_schema_has_one_definition_per_event_a_client_is_sent() -> None:
    sent = [cls for cls in typing.get_args(AgentEvent) if cls not in UNSENT]
    assert [ref["$ref"].rsplit("/", 1)[-1] for ref in SCHEMA["oneOf"]] == [
        cls.__name__ for cls in sent
    ]
    assert "UsageEvent" not in SCHEMA["$defs"]  # folded by the reducer, never sent


@pytest.mark.parametrize("cls", eventschema.sent(), ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_event_schema_every_frame_sent_is_valid(cls: type[Any], data: st.DataObject) -> None:
    event = data.draw(_instances(cls))
    VALIDATOR.validate(_sent(event))


def test_event_schema_an_unset_optional_field_is_left_out_not_null() -> None:
    frame = _sent(RunStartEvent("run_1", "conv_1", None, "msg_2"))
    assert "userMessageId" not in frame
    VALIDATOR.validate(frame)
    assert not VALIDATOR.is_valid({**frame, "userMessageId": None})


def test_event_schema_refuses_a_frame_the_client_could_not_read() -> None:
    frame = _sent(ToolEndEvent("call_1", "error", error="No.", output_json='{"secret": 1}'))
    assert VALIDATOR.is_valid(frame)
    renamed = {**frame, "document_id": "d"}  # a field under its Python name
    assert not VALIDATOR.is_valid(renamed)
    assert not VALIDATOR.is_valid({**frame, "outputJson": "{}"})  # never sent
    assert not VALIDATOR.is_valid({"type": "text"})  # its content missing
    assert not VALIDATOR.is_valid({**_sent(TextEvent("hi")), "type": "usage"})
