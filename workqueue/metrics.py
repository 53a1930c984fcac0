"""Prometheus metrics for the queue, read from the database at scrape time.

A custom collector (no counters kept in process memory, so every replica reports the same
numbers: read the gauges as last/max across instances, never as a sum):

- per queue: ``workqueue_queue_depth`` (ready now), ``workqueue_queue_pending`` (reserved
  by a wire poll, not acked), ``workqueue_queue_running`` (starting or active),
  ``workqueue_queue_stuck`` (lapsed holders, and queued items far past their run_after);
- per self_hosted environment: ``workqueue_environment_depth``, ``…_pending`` and
  ``…_workers_polling``, exactly what the wire's ``/work/stats`` reports.

Mount :func:`metrics_view` where your scraper can reach it (the demo serves ``/metrics``),
or add :class:`QueueCollector` to a registry you already expose with :func:`register`.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.db.models import Count
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("workqueue.metrics")

QUEUE_GAUGES = (
    ("depth", "Queued items ready to run now (due, not reserved by a wire poll).", "ready"),
    ("pending", "Queued wire items reserved by a poll and not acknowledged yet.", "pending"),
    ("running", "Items held by a worker (starting or active).", "running"),
    ("stuck", "Held items whose lease lapsed, and queued items far past their run_after.", "stuck"),
)
ENVIRONMENT_GAUGES = (
    ("depth", "Wire items of the environment ready to be polled."),
    ("pending", "Wire items of the environment polled but not acknowledged yet."),
    ("workers_polling", "Distinct worker ids that polled the environment within the polling window."),
)


def _per_queue(queryset) -> dict[str, int]:
    return dict(queryset.order_by().values_list("queue").annotate(n=Count("id")).values_list("queue", "n"))


class QueueCollector(Collector):
    """Collect the queue and environment gauges with a few aggregate queries per scrape."""

    def collect(self):
        from workqueue.conf import wq_settings
        from workqueue.models import WorkItem

        items = WorkItem.objects.all()
        known = set(wq_settings().queues)
        for name, help_text, scope in QUEUE_GAUGES:
            gauge = GaugeMetricFamily(f"workqueue_queue_{name}", help_text, labels=["queue"])
            counts = _per_queue(getattr(items, scope)())
            for queue in sorted(known | set(counts)):
                gauge.add_metric([queue], counts.get(queue, 0))
            yield gauge

        stats = WorkItem.objects.stats_all()
        for name, help_text in ENVIRONMENT_GAUGES:
            gauge = GaugeMetricFamily(f"workqueue_environment_{name}", help_text, labels=["environment"])
            for env_id, values in stats.items():
                gauge.add_metric([env_id], getattr(values, name))
            yield gauge

    def describe(self):
        # Nothing to describe up front: describing would cost a scrape at registration.
        return []


registry = CollectorRegistry(auto_describe=False)
registry.register(QueueCollector())


def register(target: CollectorRegistry) -> QueueCollector:
    """Add a QueueCollector to ``target`` (e.g. ``prometheus_client.REGISTRY``); return it."""
    collector = QueueCollector()
    target.register(collector)
    return collector


@require_GET
def metrics_view(request):
    """The gauges in the Prometheus text format (503 when the database cannot be read)."""
    try:
        body = generate_latest(registry)
    except DatabaseError:
        log.warning("metrics scrape could not read the database", exc_info=True)
        return HttpResponse("# the work queue database is unavailable\n", status=503, content_type="text/plain")
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
