"""A trace's context travels with a Cloud Task (shared/observe/propagation.py): the
delivery's span, in another process, is a child of the span that enqueued it."""

from __future__ import annotations

import json

from opentelemetry.trace import get_current_span

from shared.observe import propagation, setup


def test_a_delivery_continues_the_trace_of_the_span_that_enqueued_it() -> None:
    sender, receiver = setup.in_memory(), setup.in_memory()  # two processes' own
    assert sender.tracer is not None and receiver.tracer is not None
    with sender.tracer.start_as_current_span("enqueue tool") as enqueuing:
        headers = propagation.carried()
        payload = json.dumps({"taskId": "t1", **propagation.carried()})
    assert set(headers) == {"traceparent"}
    for carrier in (headers, json.loads(payload)):
        context = propagation.extract(carrier)
        with receiver.tracer.start_as_current_span("deliver tool", context=context):
            assert propagation.current_trace_id() == format(
                enqueuing.get_span_context().trace_id, "032x"
            )
    assert receiver.spans is not None
    for delivered in receiver.spans.get_finished_spans():
        assert delivered.parent is not None
        assert delivered.parent.span_id == enqueuing.get_span_context().span_id
        assert delivered.context.trace_id == enqueuing.get_span_context().trace_id


def test_header_names_are_read_whatever_their_case() -> None:
    sender = setup.in_memory()
    assert sender.tracer is not None
    with sender.tracer.start_as_current_span("enqueue") as span:
        (value,) = propagation.carried().values()
    context = propagation.extract({"Traceparent": value, "Content-Type": "application/json"})
    assert get_current_span(context).get_span_context().span_id == span.get_span_context().span_id


def test_a_task_without_a_trace_or_with_a_forged_one_starts_its_own() -> None:
    assert propagation.carried() == {}  # nothing traced: nothing carried
    assert propagation.current_trace_id() is None
    for carrier in ({}, {"traceparent": "00-not-a-trace-01"}, {"traceparent": "x" * 5000}):
        context = propagation.extract(carrier)
        assert not get_current_span(context).get_span_context().is_valid
