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
With ``WORKQUEUE["METRICS_TOKEN"]`` set, the view answers only ``Authorization: Bearer
<token>`` (401 otherwise). The view reuses a scrape's figures for ``WORKQUEUE["METRICS_CACHE"]``
seconds (5) and collects one scrape at a time, so scrapes cannot load the database.

What only a worker process knows (its runs, claims, lost leases, stalls) is counted there and
served by ``runworker --metrics-port``: see :mod:`workqueue.worker.metrics`.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time

from django.core.signals import setting_changed
from django.db import DatabaseError
from django.db.models import Count
from django.dispatch import receiver
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


_cache_lock = threading.Lock()
_cached: tuple[float, bytes] | None = None  # (monotonic time collected, body)


def clear_cache() -> None:
    """Forget the cached figures (the next scrape reads the database)."""
    global _cached
    with _cache_lock:
        _cached = None


def collect(max_age: float) -> bytes:
    """The scrape body, read afresh only when the cached one is older than ``max_age`` seconds."""
    global _cached
    with _cache_lock:  # concurrent scrapes wait for one collection rather than each running it
        now = time.monotonic()
        if _cached is not None and now - _cached[0] < max_age:
            return _cached[1]
        body = generate_latest(registry)
        _cached = (time.monotonic(), body) if max_age > 0 else None
        return body


@receiver(setting_changed)
def _settings_changed(setting, **kwargs):
    if setting == "WORKQUEUE":
        clear_cache()


def _authorized(request, token: str | None) -> bool:
    if token is None:
        return True
    scheme, _, presented = request.META.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


@require_GET
def metrics_view(request):
    """The gauges in the Prometheus text format (401 without the token, 503 when the database cannot be read)."""
    from workqueue.conf import wq_settings

    conf = wq_settings()
    if not _authorized(request, conf.metrics_token):
        response = HttpResponse("# a bearer token is required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    try:
        body = collect(conf.metrics_cache)
    except DatabaseError:
        log.warning("metrics scrape could not read the database", exc_info=True)
        return HttpResponse("# the work queue database is unavailable\n", status=503, content_type="text/plain")
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
