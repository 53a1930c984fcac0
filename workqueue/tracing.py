"""OpenTelemetry traces and metrics for the queue, when the ``otel`` extra is installed.

``pip install "django-workqueue-operations[otel]"`` adds ``opentelemetry-api`` and
``opentelemetry-sdk``. Without them every function here is a no-op and nothing from
OpenTelemetry is imported (the first call tries one import, which fails, and remembers that).
With them, and a tracer/meter provider configured by the site (the SDK, an exporter), you get:

- **propagation**: ``enqueue`` (and ``enqueue_many``, ``operations.start`` and the
  django.tasks backend, which goes through it) stores the current W3C trace context
  (``traceparent``/``tracestate``) in the item's ``trace_context`` column;
- **a consumer span per run**, ``workqueue.run {queue}``, whose parent is that context, so
  the run appears in the trace of the request that enqueued it. Attributes follow the
  OpenTelemetry messaging conventions where they fit (``messaging.system`` = ``workqueue``,
  ``messaging.operation.type`` = ``process``, ``messaging.operation.name`` = ``run``,
  ``messaging.destination.name`` = the queue, ``messaging.message.id`` = the public id,
  ``messaging.client.id`` = the worker id, ``error.type``) plus our own
  ``workqueue.key``, ``workqueue.attempt``, ``workqueue.reclaimed`` and
  ``workqueue.outcome`` (succeeded, retried, failed, cancelled, lost, released);
- **metrics**: ``messaging.process.duration`` (histogram, seconds) and ``workqueue.runs``
  (counter), both by queue (``messaging.destination.name``), ``workqueue.outcome`` and
  ``error.type``; and the worker's own instruments (``workqueue.worker.metrics``: claims,
  claim batch sizes, claim and settle durations, leases lost, stalls, operations' runs);
- ``operations`` adds ``operations.begin`` / ``operations.finish`` spans inside the run span
  and a ``operations.progress`` span event per progress flush.

Where we depart from the messaging conventions: the span is named ``workqueue.run {queue}``
(the conventions say ``process {destination}``); there is no producer span at enqueue (the
enqueue is one statement inside the caller's own span, whose context we record); the
creation context is the run's parent rather than only a link, so the run shows in the
enqueuing request's trace, and each attempt is its own span with ``workqueue.attempt``.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

_UNSET: Any = object()
_otel: Any = _UNSET  # None when OpenTelemetry is not installed; a namespace of what we use when it is

SYSTEM = "workqueue"


def _placeholder(provider, class_name: str):
    """``provider`` if it is the API's stand-in for a provider not yet installed, else a marker
    that no provider is (so an already installed one counts as configured)."""
    return provider if type(provider).__name__ == class_name else _UNSET


def _load():
    global _otel
    if _otel is not _UNSET:
        return _otel
    try:
        from opentelemetry import context, metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        _otel = None
        return None
    tracer = trace.get_tracer("workqueue")
    meter = metrics.get_meter("workqueue")
    _otel = SimpleNamespace(
        trace=trace,
        metrics=metrics,
        # The placeholders the API hands out until the site installs a provider (the SDK): while
        # both are still current, a run's span records nothing and its metrics go nowhere.
        unset_tracers=_placeholder(trace.get_tracer_provider(), "ProxyTracerProvider"),
        unset_meters=_placeholder(metrics.get_meter_provider(), "_ProxyMeterProvider"),
        context=context,
        propagator=TraceContextTextMapPropagator(),
        tracer=tracer,
        meter=meter,
        consumer=trace.SpanKind.CONSUMER,
        error=trace.Status(trace.StatusCode.ERROR),
        duration=meter.create_histogram(
            "messaging.process.duration", unit="s", description="How long a work item's run took."
        ),
        runs=meter.create_counter("workqueue.runs", unit="{run}", description="Work item runs, by queue and outcome."),
    )
    return _otel


def available() -> bool:
    """Whether OpenTelemetry is installed (tracing on)."""
    return _load() is not None


def inject() -> dict | None:
    """The current W3C trace context as a dict to store on an item, or None (no span, no OpenTelemetry)."""
    ot = _otel if _otel is not _UNSET else _load()
    if ot is None:
        return None
    if not ot.trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    ot.propagator.inject(carrier)
    return carrier or None


class RunTrace:
    """One run's span, the context token that made it current, and its start time."""

    __slots__ = ("queue", "span", "started", "token")

    def __init__(self, span, token, queue: str):
        self.span = span
        self.token = token
        self.queue = queue
        self.started = time.perf_counter()


#: How long an answer of _configured() is kept: asking the API costs two environment lookups,
#: about a microsecond each, which per run of a no-op handler was a tenth of the worker's CPU.
_RECHECK_SECONDS = 1.0
_checked: list = [0.0, False]  # [monotonic time of the last look, configured then]


def _configured(ot) -> bool:
    """Whether the site has installed a tracer or meter provider: asked again at most every
    ``_RECHECK_SECONDS``, so one installed after the worker started is seen within a second."""
    now = time.monotonic()
    if now - _checked[0] < _RECHECK_SECONDS:
        return bool(_checked[1])
    configured = (
        ot.trace.get_tracer_provider() is not ot.unset_tracers or ot.metrics.get_meter_provider() is not ot.unset_meters
    )
    _checked[:] = [now, configured]
    return configured


def start_run(item, worker_id: str) -> RunTrace | None:
    """Open the run's consumer span (current from here on in this thread or task); None without
    OpenTelemetry, or when there is nothing to record and nothing to pass on (no provider installed
    and no trace context on the item)."""
    ot = _otel if _otel is not _UNSET else _load()
    if ot is None:
        return None
    if not item.trace_context and not _configured(ot):
        # The API alone would open a non-recording span with no parent: nothing a later
        # inject() could carry, no metrics. (With a trace context on the item the non-recording
        # span still carries it on to what the handler enqueues, so that case takes the path below.)
        return None
    parent = ot.propagator.extract(item.trace_context) if item.trace_context else None
    span = ot.tracer.start_span(
        f"workqueue.run {item.queue}",
        context=parent,
        kind=ot.consumer,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": item.queue,
            "messaging.message.id": item.public_id,
            "messaging.client.id": worker_id,
            "workqueue.key": item.key,
            "workqueue.attempt": item.attempts,
            "workqueue.reclaimed": bool(item.reclaimed),
        },
    )
    token = ot.context.attach(ot.trace.set_span_in_context(span))
    return RunTrace(span, token, item.queue)


def end_run(run: RunTrace | None, outcome: str, exc: BaseException | None = None) -> None:
    """Close the run's span with its outcome (and error type) and record the metrics."""
    if run is None:
        return
    ot = _otel
    elapsed = time.perf_counter() - run.started
    span = run.span
    attributes = {"messaging.destination.name": run.queue, "workqueue.outcome": outcome}
    span.set_attribute("workqueue.outcome", outcome)
    if exc is not None:
        error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
        attributes["error.type"] = error_type
        span.set_attribute("error.type", error_type)
        if outcome in ("retried", "failed"):
            span.record_exception(exc)
            span.set_status(ot.trace.Status(ot.trace.StatusCode.ERROR, str(exc)[:256]))
    if run.token is not None:
        try:
            ot.context.detach(run.token)
        except Exception:  # detached in another context (never on our paths): the span still ends
            pass
    span.end()
    ot.duration.record(elapsed, attributes)
    ot.runs.add(1, attributes)


def meter():
    """The queue's OpenTelemetry meter while the site has a provider installed (for
    ``workqueue.worker.metrics``' twins); None without OpenTelemetry or before a provider is."""
    ot = _otel if _otel is not _UNSET else _load()
    if ot is None or not _configured(ot):
        return None
    return ot.meter


def span(name: str, attributes: dict | None = None):
    """A span around a step inside a run (``with tracing.span(...):``); a no-op without OpenTelemetry."""
    ot = _otel if _otel is not _UNSET else _load()
    if ot is None or not _configured(ot):
        # Without a provider the API's span would be a non-recording one carrying the current
        # span's context: the same context that stays current without it.
        return _NOOP
    return ot.tracer.start_as_current_span(name, attributes=attributes)


def current_span():
    """The current span (to add events to from another thread later), or None."""
    ot = _otel if _otel is not _UNSET else _load()
    if ot is None:
        return None
    found = ot.trace.get_current_span()
    return found if found.get_span_context().is_valid else None


def add_event(target, name: str, attributes: dict | None = None) -> None:
    """Add an event to ``target`` (a span from ``current_span()``); nothing when it is None."""
    if target is not None:
        target.add_event(name, attributes or {})


class _Noop:
    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NOOP = _Noop()


def handoff(run: RunTrace | None) -> RunTrace | None:
    """Detach the run's span from this thread (its run goes on elsewhere: ``resume`` there)."""
    if run is not None and run.token is not None:
        try:
            _otel.context.detach(run.token)
        except Exception:
            pass
        run.token = None
    return run


def resume(run: RunTrace | None) -> None:
    """Make a handed-off run's span current in this thread or task again."""
    if run is not None:
        run.token = _otel.context.attach(_otel.trace.set_span_in_context(run.span))
