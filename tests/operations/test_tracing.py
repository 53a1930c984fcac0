"""OpenTelemetry for operations: start records the caller's trace; the run has begin/finish
spans inside the queue's run span, and a progress event per flush."""

from __future__ import annotations

import pytest

import operations
from tests.operations.conftest import InlineWorker, items_for, wait_for_state

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operation_started_inside_a_span_runs_in_its_trace_with_begin_finish_and_progress(otel):
    from opentelemetry import trace

    exporter, _ = otel
    with trace.get_tracer("tests").start_as_current_span("POST /exports") as request_span:
        op = operations.start("test.ops.tiers", {"units": 3, "per_unit": 10, "pause": 0.15})
    trace_id = request_span.get_span_context().trace_id
    (item,) = items_for(op.id)
    assert item.trace_context["traceparent"].split("-")[1] == f"{trace_id:032x}"

    with InlineWorker("ops-tracer"):
        wait_for_state(op.id, "succeeded")

    spans = {s.name: s for s in exporter.get_finished_spans()}
    run = spans["workqueue.run operations"]
    begin, finish = spans["operations.begin"], spans[f"operations.finish {op.kind}"]
    assert run.context.trace_id == trace_id and run.parent.span_id == request_span.get_span_context().span_id
    assert begin.parent.span_id == run.context.span_id and finish.parent.span_id == run.context.span_id
    assert begin.attributes["operations.begun"] is True
    assert finish.attributes["operations.state"] == "succeeded"
    assert (finish.attributes["operations.id"], finish.attributes["operations.attempt"]) == (op.id, 1)
    progress = [e for e in run.events if e.name == "operations.progress"]
    assert progress, "a flush at each unit boundary adds an event"
    assert all(e.attributes["operations.units_total"] == 3 for e in progress)
    assert max(e.attributes["operations.units_done"] for e in progress) >= 2
    assert run.attributes["workqueue.outcome"] == "succeeded"


def test_a_task_enqueued_inside_a_span_carries_its_trace(otel):
    from opentelemetry import trace

    from tests.testapp.tasks import add

    with trace.get_tracer("tests").start_as_current_span("view") as span:
        result = add.enqueue(1, 2)
    (item,) = items_for(result.id)
    assert item.trace_context["traceparent"].split("-")[1] == f"{span.get_span_context().trace_id:032x}"
