"""Workers alive and stale, and the runs of the sweeps (recover, reap)."""

from __future__ import annotations

from collections import defaultdict

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models.functions import Now
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from workqueue.admin import snapshot as dashboard
from workqueue.admin.base import (
    FastListMixin,
    GuardedModelAdmin,
    LiveListMixin,
    ReadOnlyMixin,
)
from workqueue.conf import wq_settings
from workqueue.models import (
    MaintenanceRun,
    State,
    Worker,
    WorkItem,
)
from workqueue.templatetags.workqueue_admin import DASH, badge, duration, seconds_between, timestamp

#: Running states: an item in one of them is held by the worker its claimed_by names.
HELD_STATES = (State.STARTING, State.ACTIVE, State.STOPPING)
#: The held items a page reads at most (one query for all its workers), and shows per worker.
HELD_READ_CAP = 1000
HELD_SHOWN = 10


def held_items(worker_ids) -> dict[str, list[WorkItem]]:
    """The items each worker holds right now (its leases), oldest first: one query for all."""
    held: dict[str, list[WorkItem]] = defaultdict(list)
    if not worker_ids:
        return held
    rows = (
        WorkItem.objects.filter(claimed_by__in=list(worker_ids), state__in=HELD_STATES)
        .only("id", "queue", "key", "state", "claimed_by")
        .order_by("id")[:HELD_READ_CAP]
    )
    for item in rows:
        held[item.claimed_by].append(item)
    return held


class WorkerChangeList(ChangeList):
    """The workers' page: each row learns what it holds, from one query for the whole page."""

    def get_results(self, request):
        super().get_results(request)
        workers = list(self.result_list)  # evaluates the page's queryset once; its rows are cached
        held = held_items([w.id for w in workers])
        for worker in workers:
            worker.held = held.get(worker.id, [])


@admin.register(Worker)
class WorkerAdmin(LiveListMixin, ReadOnlyMixin, GuardedModelAdmin):
    list_display = (
        "id",
        "status_display",
        "last_seen_display",
        "host",
        "pid",
        "queues_display",
        "pool_display",
        "holding_display",
        "runs_display",
    )
    list_filter = ("state", "host")
    search_fields = ("=id", "host")
    show_facets = admin.ShowFacets.NEVER
    fields = (
        "id",
        "status_display",
        "host",
        "pid",
        "queues_display",
        "pool_display",
        "holding_display",
        "processed",
        "failed",
        "started_at",
        "last_seen",
    )
    readonly_fields = ("status_display", "queues_display", "pool_display", "holding_display")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(db_now=Now())

    def get_changelist(self, request, **kwargs):
        return WorkerChangeList

    @admin.display(description="holds")
    def holding_display(self, obj):
        """Links to the items it holds (its leases), the first HELD_SHOWN of them."""
        held = getattr(obj, "held", None)
        if held is None:  # the worker's own page: its items alone
            held = held_items([obj.id]).get(obj.id, [])
        if not held:
            return DASH
        links = format_html_join(
            " ",
            '<a class="wq-chip" href="{}" title="{} on {}">{}</a>',
            (
                (reverse("admin:workqueue_workitem_change", args=[i.pk]), i.state, i.queue, _short(i.key))
                for i in held[:HELD_SHOWN]
            ),
        )
        more = len(held) - HELD_SHOWN
        if more > 0:
            url = reverse("admin:workqueue_workitem_changelist")
            return format_html('{} <a href="{}?situation=running">and {:,} more</a>', links, url, more)
        return links

    @admin.display(description="status")
    def status_display(self, obj):
        if obj.state == "stopped":
            return badge("exited", "quiet", "Stopped cleanly")
        stale_after = wq_settings().worker_stale_after
        if (seconds_between(obj.db_now, obj.last_seen) or 0) <= stale_after:
            return badge("alive", "ok")
        return badge("stale", "error", f"Not seen for more than {duration(stale_after)}")

    @admin.display(description="queues")
    def queues_display(self, obj):
        return ", ".join(obj.queues) if obj.queues else "all registered"

    @admin.display(description="concurrency")
    def pool_display(self, obj):
        """Threads, event-loop slots and child processes (with their pids), as its heartbeat said."""
        pool = obj.pool or {}
        parts = []
        if pool.get("threads"):
            parts.append(f"{pool['threads']} threads")
        if pool.get("async"):
            parts.append(f"{pool['async']} async")
        if pool.get("processes"):
            children = pool.get("children") or []
            pids = f" (pids {', '.join(map(str, children))})" if children else " (none started yet)"
            parts.append(f"{pool['processes']} processes{pids}")
        for key, word in (("replaced", "replaced"), ("timeouts", "timed out"), ("abandoned", "threads abandoned")):
            if pool.get(key):
                parts.append(f"{pool[key]} {word}")
        return " · ".join(parts)

    @admin.display(description="runs", ordering="processed")
    def runs_display(self, obj):
        """Processed, and failed among them (both on the worker's page too)."""
        if not obj.failed:
            return f"{obj.processed:,}"
        return format_html(
            '{} <span class="wq-lapsed" title="failed">· {:,} failed</span>', f"{obj.processed:,}", obj.failed
        )

    @admin.display(description="processed", ordering="processed")
    def processed_display(self, obj):
        return f"{obj.processed:,}"

    @admin.display(description="failed", ordering="failed")
    def failed_display(self, obj):
        return f"{obj.failed:,}"

    @admin.display(description="last seen", ordering="-last_seen")
    def last_seen_display(self, obj):
        return format_html(
            '<span title="{}">{} ago</span>',
            timestamp(obj.last_seen),
            duration(seconds_between(obj.db_now, obj.last_seen)),
        )


def _short(key: str, limit: int = 24) -> str:
    return key if len(key) <= limit else key[: limit - 1] + "…"


class SweepFilter(admin.SimpleListFilter):
    """The sweeps by name, from the fixed list (never a DISTINCT over a table that keeps growing)."""

    title = "sweep"
    parameter_name = "name"

    def lookups(self, request, model_admin):
        return [(name, name) for name in dashboard.SWEEPS]

    def queryset(self, request, queryset):
        return queryset.filter(name=self.value()) if self.value() else queryset


@admin.register(MaintenanceRun)
class MaintenanceRunAdmin(FastListMixin, ReadOnlyMixin, GuardedModelAdmin):
    list_display = ("name", "started_at", "took_display", "result_display", "counts_display", "host")
    list_filter = (SweepFilter, "ok")
    sortable_by = ("started_at",)
    fields = ("name", "host", "started_at", "finished_at", "took_display", "result_display", "counts", "error")
    readonly_fields = ("took_display", "result_display")

    @admin.display(description="took")
    def took_display(self, obj):
        seconds = seconds_between(obj.finished_at, obj.started_at)
        if seconds is None:
            return DASH
        return f"{seconds:.2f} s" if seconds < 60 else duration(seconds)

    @admin.display(description="result")
    def result_display(self, obj):
        if not obj.ok:
            return badge("failed", "error", obj.error)
        if obj.finished_at is None:
            return badge("running", "info", "Running, or its process died before recording the end")
        return badge("ok", "ok")

    @admin.display(description="counts")
    def counts_display(self, obj):
        return " ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in (obj.counts or {}).items())
