"""The worker process's own metrics: what only a worker knows, on its own Prometheus registry.

``workqueue.metrics`` reads gauges from the database at scrape time (every replica says the
same). These are the other kind: counters and histograms a ``runworker`` process keeps in
memory, served by ``runworker --metrics-port N`` (``WORKQUEUE["WORKER_METRICS_PORT"]``) with
prometheus-client's HTTP server on :data:`registry` (sum them across workers):

- ``workqueue_worker_runs_total{queue,outcome}``: handler runs by how they ended (succeeded,
  retried, failed, cancelled, lost, released, settled);
- ``workqueue_worker_run_duration_seconds{queue}``: from the handler's start to its ending;
- ``workqueue_worker_claims_total``: claim statements run (empty ones included);
- ``workqueue_worker_claim_batch_size``: items per claim that took any (the empty claims are
  ``claims_total`` minus this histogram's ``_count``; its ``_sum`` is the items claimed);
- ``workqueue_worker_claim_seconds``: one claim, statement and round trip;
- ``workqueue_worker_settle_seconds{statement}``: the worker's settling writes
  (``complete_many``, the settler's batches; ``fail``; ``release_many``);
- ``workqueue_worker_leases_lost_total{queue}``: holds whose lease this worker found gone
  (another claim took the item, or the lease ran out unrenewed; found by a renewal or by the
  settlement), not counting a cancel or a hard timeout (their own ``stop_reason``);
- ``workqueue_worker_stalls_total{queue}``: holders cancelled for no ``ctx.progress()``
  within the queue's ``stall`` budget (the design's sign that a lease or budget is sized wrong);
- and what other apps add with :class:`Count` / :class:`Timing` (``operations`` adds
  ``operations_worker_runs_total{kind,outcome}``), plus the client's ``process_*`` figures.

Recording costs a label lookup and an increment, never SQL. With the ``otel`` extra installed
and a meter provider configured, each instrument also records to OpenTelemetry under its
``otel`` name (``workqueue.claims``, ``workqueue.leases_lost``, ...); the runs themselves are
``workqueue.tracing``'s ``workqueue.runs`` and ``messaging.process.duration`` there.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from workqueue import tracing

registry = CollectorRegistry()
ProcessCollector(registry=registry)

#: Seconds: from a few milliseconds to an hour (a run), or to ten seconds (a statement).
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
STATEMENT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)

_UNSET: Any = object()


class _Instrument:
    """A Prometheus metric on :data:`registry` and, once OpenTelemetry records, its twin there.

    ``labels`` maps each Prometheus label to the OpenTelemetry attribute it becomes.
    """

    def __init__(self, otel: str, unit: str, description: str, labels: dict[str, str]):
        self.otel_name = otel
        self.unit = unit
        self.description = description
        self.attributes = tuple(labels.values())
        self._twin: Any = _UNSET

    def _make_twin(self, meter) -> Any:
        raise NotImplementedError

    def twin(self) -> Any:
        """The OpenTelemetry instrument while a meter provider is installed, else None."""
        meter = tracing.meter()
        if meter is None:
            return None
        if self._twin is _UNSET:
            self._twin = self._make_twin(meter)
        return self._twin


class Count(_Instrument):
    """A counter: ``add(*label_values)``."""

    def __init__(self, name: str, description: str, labels: dict[str, str] | None = None, *, otel: str, unit: str):
        labels = labels or {}
        super().__init__(otel, unit, description, labels)
        self.metric = Counter(name, description, list(labels), registry=registry)

    def _make_twin(self, meter) -> Any:
        return meter.create_counter(self.otel_name, unit=self.unit, description=self.description)

    def add(self, *values: str, amount: int = 1) -> None:
        (self.metric.labels(*values) if values else self.metric).inc(amount)
        twin = self.twin()
        if twin is not None:
            twin.add(amount, dict(zip(self.attributes, values, strict=True)))


class Timing(_Instrument):
    """A histogram: ``observe(value, *label_values)``."""

    def __init__(
        self,
        name: str,
        description: str,
        labels: dict[str, str] | None = None,
        *,
        otel: str,
        unit: str = "s",
        buckets: tuple[float, ...] = STATEMENT_BUCKETS,
    ):
        labels = labels or {}
        super().__init__(otel, unit, description, labels)
        self.metric = Histogram(name, description, list(labels), registry=registry, buckets=buckets)

    def _make_twin(self, meter) -> Any:
        return meter.create_histogram(self.otel_name, unit=self.unit, description=self.description)

    def observe(self, value: float, *values: str) -> None:
        (self.metric.labels(*values) if values else self.metric).observe(value)
        twin = self.twin()
        if twin is not None:
            twin.record(value, dict(zip(self.attributes, values, strict=True)))


class RunCounts(Collector):
    """Runs by (queue, outcome) and their durations per queue: the per-item instruments.

    Each thread that ends runs counts into its own plain dicts (one writer, so no lock and no
    prometheus-client child per record: a fifth of the cost); a scrape sums the threads'."""

    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self._local = threading.local()
        self._shards: list[tuple[dict, dict]] = []  # every thread's (runs, durations), kept after it ends
        self._lock = threading.Lock()

    def _shard(self) -> tuple[dict, dict]:
        shard = getattr(self._local, "shard", None)
        if shard is None:
            shard = self._local.shard = ({}, {})
            with self._lock:
                self._shards.append(shard)
        return shard

    def record(self, queue: str, outcome: str, seconds: float | None) -> None:
        runs, durations = self._shard()
        key = (queue, outcome)
        runs[key] = runs.get(key, 0) + 1
        if seconds is None:
            return
        counts = durations.get(queue)
        if counts is None:
            counts = durations[queue] = [0] * (len(self.buckets) + 1) + [0.0]  # per bucket, +Inf, sum
        counts[bisect.bisect_left(self.buckets, seconds)] += 1
        counts[-1] += seconds

    def _totals(self) -> tuple[dict, dict]:
        runs: dict[tuple[str, str], int] = {}
        durations: dict[str, list] = {}
        with self._lock:
            shards = list(self._shards)
        for shard_runs, shard_durations in shards:
            for key, n in list(shard_runs.items()):
                runs[key] = runs.get(key, 0) + n
            for queue, counts in list(shard_durations.items()):
                total = durations.setdefault(queue, [0] * len(counts))
                for i, n in enumerate(list(counts)):
                    total[i] += n
        return runs, durations

    def collect(self):
        runs, durations = self._totals()
        counter = CounterMetricFamily(
            "workqueue_worker_runs", "Handler runs by queue and how they ended.", labels=["queue", "outcome"]
        )
        for (queue, outcome), n in sorted(runs.items()):
            counter.add_metric([queue, outcome], n)
        yield counter
        histogram = HistogramMetricFamily(
            "workqueue_worker_run_duration_seconds", "Seconds from a handler's start to its ending.", labels=["queue"]
        )
        bounds = [*(floatToGoString(b) for b in self.buckets), "+Inf"]
        for queue, counts in sorted(durations.items()):
            cumulative = list(itertools.accumulate(counts[:-1]))
            histogram.add_metric([queue], list(zip(bounds, cumulative, strict=True)), sum_value=counts[-1])
        yield histogram

    def describe(self):
        return list(self.collect())  # at registration only: the names, for the duplicate check


RUN_COUNTS = RunCounts(RUN_BUCKETS)
registry.register(RUN_COUNTS)

QUEUE = {"queue": "messaging.destination.name"}

CLAIMS = Count(
    "workqueue_worker_claims", "Claim statements run (empty ones included).", otel="workqueue.claims", unit="{claim}"
)
CLAIM_BATCH = Timing(
    "workqueue_worker_claim_batch_size",
    "Items per claim that took any.",
    otel="workqueue.claim.batch_size",
    unit="{item}",
    buckets=BATCH_BUCKETS,
)
CLAIM_SECONDS = Timing("workqueue_worker_claim_seconds", "Seconds one claim took.", otel="workqueue.claim.duration")
SETTLE_SECONDS = Timing(
    "workqueue_worker_settle_seconds",
    "Seconds one settling write of the worker took, by statement (complete_many, fail, release_many).",
    {"statement": "workqueue.statement"},
    otel="workqueue.settle.duration",
)
LEASES_LOST = Count(
    "workqueue_worker_leases_lost",
    "Holds whose lease this worker found gone, per queue.",
    QUEUE,
    otel="workqueue.leases_lost",
    unit="{lease}",
)
STALLS = Count(
    "workqueue_worker_stalls",
    "Holders cancelled for reporting no progress within the queue's stall budget, per queue.",
    QUEUE,
    otel="workqueue.stalls",
    unit="{stall}",
)

TIMEOUTS = Count(
    "workqueue_worker_timeouts",
    "Runs this worker ended past their handler's timeout (their items given up), per queue.",
    QUEUE,
    otel="workqueue.timeouts",
    unit="{run}",
)
CHILDREN_REPLACED = Count(
    "workqueue_worker_children_replaced",
    "Process-pool children replaced, by why (died, timeout, memory, max_tasks).",
    {"reason": "workqueue.reason"},
    otel="workqueue.children_replaced",
    unit="{process}",
)


#: Whether runs are tallied (per item: the one instrument with a cost per run). Off until
#: ``serve()`` listens, so a worker without ``--metrics-port`` pays nothing per run.
record_runs = False


def run_ended(queue: str, outcome: str, started: float | None) -> None:
    """A handler's run ended (``started``: its ``time.perf_counter()`` at the start, if known).

    OpenTelemetry gets the runs from ``workqueue.tracing.end_run``, with the run's span."""
    RUN_COUNTS.record(queue, outcome, None if started is None else time.perf_counter() - started)


def claimed(items: int, started: float) -> None:
    """A claim took ``items`` items; it began at ``started`` (``time.perf_counter()``)."""
    CLAIM_SECONDS.observe(time.perf_counter() - started)
    CLAIMS.add()
    if items:
        CLAIM_BATCH.observe(items)


def settled(statement: str, started: float) -> None:
    """A settling write (``statement``) that began at ``started`` (``time.perf_counter()``) ended."""
    SETTLE_SECONDS.observe(time.perf_counter() - started, statement)


def lease_lost(queue: str) -> None:
    """The lease keeper found a hold's lease gone (it tells the holder: ``reason`` lease_lost)."""
    LEASES_LOST.add(queue)


def found_lost(queue: str, hold=None) -> None:
    """A settlement found the proof of ``hold`` (an item of ``queue``) gone: a lost lease, unless
    the holder had been told to stop already (``hold.reason``): the keeper counted a lost lease
    then, and a stall, a cancel or a timeout is not one."""
    if hold is None or hold.reason is None:
        LEASES_LOST.add(queue)


def stalled(queue: str) -> None:
    STALLS.add(queue)


def timed_out(queue: str) -> None:
    TIMEOUTS.add(queue)


def child_replaced(reason: str) -> None:
    CHILDREN_REPLACED.add(reason)


class MetricsServerError(Exception):
    """The metrics server could not listen (the port is taken, or the address is not this host's)."""


def serve(port: int, address: str = "0.0.0.0"):
    """Serve :data:`registry` over HTTP on ``address:port`` from a daemon thread; return the
    server (``shutdown()`` stops it)."""
    from prometheus_client import start_http_server

    global record_runs
    try:
        server, _thread = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        raise MetricsServerError(
            f"cannot serve worker metrics on {address}:{port} ({exc.strerror or exc}): give each runworker "
            "on a host its own --metrics-port (or WORKQUEUE['WORKER_METRICS_PORT']), one that nothing else uses"
        ) from None
    record_runs = True
    return server
