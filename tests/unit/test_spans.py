"""Each provider call's span, made at the egress (GenAI conventions): the operation,
provider, model, tokens, finish reason and time to the first token, and no content."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.clock import SystemClock
from shared.egress import gate
from shared.egress.gate import Egress
from shared.egress.provenance import InMemoryProvenanceStore
from shared.egress.screen import Screen
from shared.errors import ProviderUnavailable
from shared.families.preferences import Preferences
from shared.llm.base import ChatMessage, Finish, ModelRequest, TextDelta
from shared.llm.scripted import ScriptedProvider, Step
from shared.schemas.documents import Usage
from shared.store.memory import InMemorySettingsStore
from tests.unit.helpers import FreeBudget

SAID = "Please keep the diary code 4321 to yourself."


def traced(provider: ScriptedProvider) -> tuple[Egress, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(exporter))
    screen = Screen(InMemoryProvenanceStore(), Preferences(InMemorySettingsStore(), SystemClock()))
    egress = Egress(provider, screen, FreeBudget(), tracer=tracers.get_tracer("test"))
    return egress, exporter


async def test_a_chat_call_is_one_client_span_with_its_usage_and_no_content() -> None:
    usage = Usage(input_tokens=17, output_tokens=4)
    provider = ScriptedProvider(
        [Step([TextDelta("It is "), TextDelta(SAID), Finish("stop", usage)])]
    )
    egress, exporter = traced(provider)
    request = ModelRequest(system="You are Spark AI Agent.", messages=[ChatMessage("user", SAID)])
    events = [e async for e in await egress.chat("alice", request)]
    assert isinstance(events[-1], Finish)
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "chat scripted"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "scripted"
    assert attributes["gen_ai.request.model"] == "scripted"
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (
        17,
        4,
    )
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["spark.time_to_first_token_ms"] >= 0
    assert attributes["spark.opt_out.withheld"] is False
    everything = json.dumps(
        [span.name, attributes, [e.attributes for e in span.events]], default=str
    )
    assert "diary" not in everything and "4321" not in everything


async def test_a_task_tools_call_and_a_failed_one_are_spans_too() -> None:
    provider = ScriptedProvider(
        [
            Step.reply("<lesson/>"),
            Step([TextDelta("half")], error=ProviderUnavailable(f"failed on {SAID}")),
        ]
    )
    egress, exporter = traced(provider)
    request = ModelRequest(system="Write.", messages=[ChatMessage("user", SAID)])
    assert await egress.complete("alice", request, "The draft") == "<lesson/>"
    with pytest.raises(ProviderUnavailable):
        await egress.complete("alice", request, "The draft")
    done, failed = exporter.get_finished_spans()
    assert (
        done.attributes is not None
        and done.attributes["gen_ai.operation.name"] == "text_completion"
    )
    assert failed.status.description == "ProviderUnavailable"
    assert SAID not in json.dumps([dict(failed.attributes or {}), failed.status.description])


async def test_without_a_tracer_the_stream_is_the_providers_own_under_the_meter() -> None:
    provider = ScriptedProvider([Step.reply("Hi")])
    screen = Screen(InMemoryProvenanceStore(), Preferences(InMemorySettingsStore(), SystemClock()))
    egress = Egress(provider, screen, FreeBudget())
    stream = await egress.chat("alice", ModelRequest(system="s", messages=[]))
    # One layer only, the meter's (it settles the call's reservation), on the provider's.
    assert stream.ag_code is gate._settled.__code__  # type: ignore[attr-defined]
    inner = stream.ag_frame.f_locals["stream"]  # type: ignore[attr-defined]
    assert inner.ag_code is ScriptedProvider.stream.__code__
    assert [e async for e in stream]
