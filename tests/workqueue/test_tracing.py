"""OpenTelemetry: the enqueuer's trace context travels on the item; each run is a consumer span.

The spans come from the real claim loop (a Worker on threads of this process) into the SDK's
in-memory exporter. The last test proves the other half of the promise: without the ``otel``
extra, nothing from OpenTelemetry is imported and the queue works the same.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT
from tests.workqueue.conftest import row
from workqueue.models import WorkItem
from workqueue.worker import Worker, WorkerOptions

pytestmark = pytest.mark.django_db(transaction=True)


def run_worker(queue: str, items: int) -> None:
    """Run the real claim loop here until it has processed ``items`` items."""
    Worker(
        WorkerOptions(queues=[queue], max_items=items, poll=0.1, worker_id="tracer", install_signals=False, grace=2)
    ).run()


def runs(exporter, queue: str) -> list:
    return sorted(
        (s for s in exporter.get_finished_spans() if s.name == f"workqueue.run {queue}"),
        key=lambda s: s.attributes["workqueue.attempt"],
    )


def points(reader, name: str) -> dict[tuple, float]:
    """Cumulative data points of metric ``name`` by (queue, outcome, error type): value or count."""
    found: dict[tuple, float] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for p in metric.data.data_points:
                    a = p.attributes
                    key = (a.get("messaging.destination.name"), a.get("workqueue.outcome"), a.get("error.type"))
                    found[key] = getattr(p, "count", None) or getattr(p, "value", 0)
    return found


def test_an_item_enqueued_inside_a_span_runs_as_a_consumer_span_of_that_trace(otel):
    from opentelemetry import trace

    exporter, reader = otel
    before = points(reader, "workqueue.runs").get(("test.noop", "succeeded", None), 0)
    with trace.get_tracer("tests").start_as_current_span("POST /signup") as request_span:
        item, _ = WorkItem.objects.enqueue("test.noop", "traced")
    request = request_span.get_span_context()
    stored = row("traced").trace_context
    assert stored["traceparent"] == f"00-{request.trace_id:032x}-{request.span_id:016x}-{request.trace_flags:02x}"
    assert item.trace_context == stored

    run_worker("test.noop", 1)

    (span,) = runs(exporter, "test.noop")
    assert span.kind == trace.SpanKind.CONSUMER
    assert span.context.trace_id == request.trace_id  # the same trace as the request
    assert span.parent.span_id == request.span_id
    assert dict(span.attributes) == {
        "messaging.system": "workqueue",
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        "messaging.destination.name": "test.noop",
        "messaging.message.id": item.public_id,
        "messaging.client.id": "tracer",
        "workqueue.key": "traced",
        "workqueue.attempt": 1,
        "workqueue.reclaimed": False,
        "workqueue.outcome": "succeeded",
    }
    assert span.status.is_ok
    after = points(reader, "workqueue.runs")
    assert after[("test.noop", "succeeded", None)] == before + 1
    assert points(reader, "messaging.process.duration")[("test.noop", "succeeded", None)] >= 1


def test_a_retry_is_a_second_run_span_with_attempt_2_and_the_error_type(otel):
    from opentelemetry import trace

    exporter, reader = otel
    key = ("test.fail", "retried", "builtins.RuntimeError")
    before = points(reader, "workqueue.runs").get(key, 0)
    with trace.get_tracer("tests").start_as_current_span("enqueue") as parent:
        WorkItem.objects.enqueue("test.fail", "twice")
    run_worker("test.fail", 2)  # test.fail retries at once, 3 attempts

    first, second = runs(exporter, "test.fail")
    assert [first.attributes["workqueue.attempt"], second.attributes["workqueue.attempt"]] == [1, 2]
    for span in (first, second):
        assert span.context.trace_id == parent.get_span_context().trace_id
        assert span.attributes["workqueue.outcome"] == "retried"
        assert span.attributes["error.type"] == "builtins.RuntimeError"
        assert not span.status.is_ok
        assert [e.name for e in span.events] == ["exception"]
    assert first.context.span_id != second.context.span_id
    assert points(reader, "workqueue.runs")[key] == before + 2
    assert row("twice").attempts == 2


def test_enqueue_outside_any_span_records_no_context_and_the_run_starts_its_own_trace(otel):
    exporter, _ = otel
    WorkItem.objects.enqueue("test.noop", "untraced")
    assert row("untraced").trace_context is None
    run_worker("test.noop", 1)
    (span,) = runs(exporter, "test.noop")
    assert span.parent is None


def test_enqueue_many_records_the_callers_context_on_every_item(otel):
    from opentelemetry import trace

    with trace.get_tracer("tests").start_as_current_span("batch") as parent:
        WorkItem.objects.enqueue_many([("test.noop", "b1"), ("test.noop", "b2")])
    want = f"{parent.get_span_context().trace_id:032x}"
    contexts = [row(k).trace_context["traceparent"] for k in ("b1", "b2")]
    assert [c.split("-")[1] for c in contexts] == [want, want]


def test_an_explicit_trace_context_wins_over_the_current_span(otel):
    from opentelemetry import trace

    given = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with trace.get_tracer("tests").start_as_current_span("elsewhere"):
        WorkItem.objects.enqueue("test.noop", "explicit", trace_context=given)
    assert row("explicit").trace_context == given


NO_OTEL = textwrap.dedent(
    """
    import sys

    class NoOpenTelemetry:
        # What an environment without the otel extra looks like: the import fails.
        attempts = []

        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                self.attempts.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    blocker = NoOpenTelemetry()
    sys.meta_path.insert(0, blocker)

    import django
    django.setup()
    import operations
    from workqueue import testing, tracing
    from workqueue.models import WorkItem
    from workqueue.worker import Worker, WorkerOptions

    item, _ = WorkItem.objects.enqueue("test.noop", "plain")
    WorkItem.objects.enqueue_many([("test.noop", "plain-2")])
    op = operations.start("test.ops.tiers", {"units": 2})
    Worker(WorkerOptions(queues=["test.noop", "operations"], max_items=3, poll=0.1, install_signals=False)).run()
    assert not tracing.available()
    loaded = sorted(m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry."))
    print("LOADED", loaded)
    print("TRIED", sorted(set(blocker.attempts)))
    print("STATES", WorkItem.objects.get(pk=item.id).outcome, operations.get(op.id).state)
    print("CONTEXT", WorkItem.objects.get(pk=item.id).trace_context)
    """
)


def test_without_the_otel_extra_nothing_from_opentelemetry_is_imported_and_work_runs(subprocess_env):
    done = subprocess.run(
        [sys.executable, "-c", NO_OTEL], cwd=ROOT, env=subprocess_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["LOADED"] == "[]"
    assert lines["TRIED"] == "['opentelemetry']"  # one look, at first use, then remembered
    assert lines["STATES"] == "succeeded succeeded"
    assert lines["CONTEXT"] == "None"


def test_an_async_handlers_run_span_is_in_the_enqueuers_trace_too(otel):
    from opentelemetry import trace

    exporter, _ = otel
    with trace.get_tracer("tests").start_as_current_span("enqueue") as parent:
        WorkItem.objects.enqueue("test.async.short", "async-traced", metadata={"seconds": "0.1"})
    run_worker("test.async.short", 1)
    (span,) = runs(exporter, "test.async.short")
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.attributes["workqueue.outcome"] == "succeeded"


NO_PROVIDER = textwrap.dedent(
    """
    from types import SimpleNamespace

    import django
    django.setup()
    from workqueue import tracing

    def item(context):
        return SimpleNamespace(queue="test.noop", public_id="work_x", key="k", attempts=1, reclaimed=False,
                               trace_context=context)

    # OpenTelemetry installed, no provider: a run with nothing to pass on opens nothing.
    print("PLAIN", tracing.start_run(item(None), "w"))
    # A run whose item carries a trace context still passes it on to what its handler enqueues.
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    run = tracing.start_run(item({"traceparent": parent}), "w")
    print("CARRIED", tracing.inject()["traceparent"].split("-")[1])
    tracing.end_run(run, "succeeded")
    print("AFTER", tracing.inject())
    # A provider installed after the worker started is seen within a second.
    import time
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
    time.sleep(tracing._RECHECK_SECONDS)
    run = tracing.start_run(item(None), "w")
    print("RECORDING", run.span.is_recording())
    tracing.end_run(run, "succeeded")
    """
)


def test_with_no_provider_installed_a_run_opens_no_span_yet_passes_a_trace_context_on(subprocess_env):
    done = subprocess.run(
        [sys.executable, "-c", NO_PROVIDER], cwd=ROOT, env=subprocess_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["PLAIN"] == "None"
    assert lines["CARRIED"] == "0af7651916cd43dd8448eb211c80319c"
    assert lines["AFTER"] == "None"
    assert lines["RECORDING"] == "True"
