"""The work-item change list and detail page, with their actions."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import django
from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Now
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from workqueue import attempts, controls, values
from workqueue.admin import charts, search
from workqueue.admin import snapshot as dashboard
from workqueue.admin.base import (
    BULK_ACTION_CAP,
    MAX_ACTION_ITEMS,
    FastListMixin,
    GuardedModelAdmin,
    LiveListMixin,
    ObjectAction,
    ObjectActionsMixin,
    QueueFilter,
    ReadOnlyMixin,
    SituationFilter,
    StuckFilter,
    live_context,
    state_badge,
)
from workqueue.conf import wq_settings
from workqueue.exceptions import InvalidInput
from workqueue.models import (
    UNSETTLED_KEYED,
    Outcome,
    QueueControl,
    State,
    WorkItem,
)
from workqueue.templatetags.workqueue_admin import (
    DASH,
    badge,
    duration,
    lease_text,
    queue_chip,
    relative,
    seconds_between,
    timestamp,
)

#: A key longer than this is cut in the list (the whole key is on hover and on the item's page).
KEY_SHOWN = 22


def _scheduled(obj) -> bool:
    db_now = getattr(obj, "db_now", None)
    return obj.state == State.QUEUED and db_now is not None and obj.run_after > db_now


@admin.register(WorkItem)
class WorkItemAdmin(ObjectActionsMixin, LiveListMixin, FastListMixin, ReadOnlyMixin, GuardedModelAdmin):
    # What fits in 1280 px beside the sidebar and the filters; the rest is on the item's page.
    list_display = (
        "key_display",
        "state_display",
        "queue_display",
        "attempts_display",
        "when_display",
        "age_display",
    )
    list_display_links = ("key_display",)
    list_filter = ("state", StuckFilter, SituationFilter, QueueFilter, "environment")
    list_select_related = ("environment",)
    list_defer = ("last_error", "metadata", "trace_context", "attempt_log")
    sortable_by = ("age_display",)
    search_fields = ("public_id", "key")
    search_help_text = search.help_text("metadata", "An exact work id (work_…) or key, a key prefix (export:42*)")
    actions = ("requeue_now", "force_stop", "retry_now", "run_now")
    # The same verbs on the item's own page, where its state admits them (confirmed, POSTed).
    object_actions = (
        ObjectAction(
            "retry_now",
            "Retry now",
            "A new run now: its attempts start again from 0 (its last error is kept).",
            lambda obj: obj.state == State.STOPPED and obj.outcome == Outcome.FAILED,
        ),
        ObjectAction("run_now", "Run now", "Due at once instead of at its run_after.", _scheduled),
        ObjectAction(
            "requeue_now",
            "Requeue now",
            "Ready at once; a worker holding it loses its lease.",
            lambda obj: obj.state in (State.QUEUED, State.STARTING, State.ACTIVE),
        ),
        ObjectAction(
            "force_stop",
            "Force stop",
            "Settled now as cancelled; a worker holding it loses its lease.",
            lambda obj: obj.state != State.STOPPED,
        ),
    )
    empty_value_display = DASH
    fieldsets = (
        (None, {"fields": ("public_id", ("queue", "key"), ("state_display", "environment"), "last_error_display")}),
        (
            "Scheduling",
            {
                "fields": (
                    ("priority", "attempts_display", "reclaimed", "group_key"),
                    ("run_after", "due_display"),
                    ("wire", "handed_out"),
                )
            },
        ),
        ("Lease", {"fields": (("lease_display", "lease_expires_at", "claimed_by"),)}),
        (
            "Timeline",
            {
                "fields": (
                    ("created_at", "age_display"),
                    ("acknowledged_at", "started_at", "last_heartbeat_at"),
                    ("stop_requested_at", "stopped_at"),
                )
            },
        ),
        ("Attempts", {"fields": ("attempts_timeline",)}),
        ("Data", {"fields": ("metadata_display", "trace_context_display")}),
    )
    readonly_fields = (
        "state_display",
        "last_error_display",
        "due_display",
        "attempts_display",
        "lease_display",
        "age_display",
        "metadata_display",
        "trace_context_display",
        "attempts_timeline",
    )

    def get_queryset(self, request):
        # One database "now" per statement: every relative time on the page uses it. A
        # queued item of a paused queue shows as paused (one primary-key probe per row).
        paused = QueueControl.objects.filter(queue=OuterRef("queue"), paused=True)
        return super().get_queryset(request).annotate(db_now=Now(), queue_paused=Exists(paused))

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["object_actions"] = self.object_action_links(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def has_object_action_permission(self, request) -> bool:
        return self.has_operate_permission(request)

    def run_object_action(self, request, obj, name: str) -> str:
        verbs = {
            "retry_now": (WorkItem.objects.retry_now, "retried"),
            "run_now": (WorkItem.objects.run_now, "made due now"),
            "requeue_now": (WorkItem.objects.requeue_now, "requeued"),
            "force_stop": (WorkItem.objects.force_stop, "force-stopped"),
        }
        verb, done = verbs[name]
        if not verb([obj.pk]):
            raise InvalidInput("its state changed meanwhile")
        return f"{obj.queue}: {done} {obj.key}."

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        terms = search.parse(term)
        if terms.error:
            failed = WorkItem.objects.filter(state=State.STOPPED, outcome=Outcome.FAILED).order_by("-stopped_at")
            return search.recent_errors(queryset, failed, "last_error", terms.error), False
        keys = UNSETTLED_KEYED, Q(state=State.STOPPED)  # two partial key indexes
        if terms.prefix:  # export:42*: the keys that start so, through the same two indexes
            starts = Q(key__startswith=terms.prefix)
            return queryset.filter((starts & keys[0]) | (starts & keys[1])), False
        # Exact matches, each arm through an index: public_id's, and a key's among the unsettled
        # items or among the stopped ones (a LIKE inside the keys has no index).
        exact = Q(public_id=term) | (Q(key=term) & keys[0]) | (Q(key=term) & keys[1])
        if terms.pairs:  # a key may hold an "=" too
            exact |= search.json_pairs("metadata", terms)
        return queryset.filter(exact), False

    def get_urls(self):
        urls = [
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name=f"{self.opts.app_label}_dashboard",
            ),
            path(
                "dashboard/charts/",
                self.admin_site.admin_view(self.charts_view),
                name=f"{self.opts.app_label}_dashboard_charts",
            ),
            path(
                "dashboard/controls/",
                self.admin_site.admin_view(self.controls_view),
                name=f"{self.opts.app_label}_dashboard_controls",
            ),
        ]
        return urls + self.object_action_urls() + super().get_urls()

    def controls_view(self, request):
        """The dashboard's flow-control form: pause, resume or change a queue's overrides
        (an empty field clears its override, back to the setting). Each change is logged."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        back = reverse(f"{self.admin_site.name}:{self.opts.app_label}_dashboard")
        queue = request.POST.get("queue", "")
        action = request.POST.get("action", "")
        try:
            if action == "pause":
                control, message = controls.pause(queue, by=request.user.get_username()), "Paused the queue."
            elif action == "resume":
                control, message = controls.resume(queue, by=request.user.get_username()), "Resumed the queue."
            elif action == "save":
                current = controls.all_controls().get(queue)
                limits, clear = {}, []
                for f in controls.FIELDS:
                    value = request.POST.get(f, "").strip()
                    if value:
                        limits[f] = value
                    elif current is not None and getattr(current, f) is not None:
                        clear.append(f)
                control = controls.write(queue, limits=limits, clear=clear, by=request.user.get_username())
                shown = controls.effective(wq_settings().queue(queue), control)
                message = "Limits: " + (
                    ", ".join(f"{f}={shown.shown(f) or 'none'} ({shown.source(f)})" for f in controls.FIELDS) + "."
                )
            else:
                raise InvalidInput(f"unknown action {action!r}")
        except InvalidInput as exc:
            self.message_user(request, f"{queue or 'Queue'}: {exc}. Nothing was changed.", messages.ERROR)
            if action == "save":  # back to the row being edited, to fix the value
                return HttpResponseRedirect(f"{back}?{urlencode({'edit': queue})}#flow-control")
            return HttpResponseRedirect(back)
        row = QueueControl.objects.get(pk=control.queue)
        self.log_change(request, row, message)
        # "demo.sleep: paused the queue.": the name as it is, the sentence after it in lower case.
        self.message_user(request, f"{control.queue}: {message[0].lower()}{message[1:]}", messages.SUCCESS)
        return HttpResponseRedirect(back)

    def dashboard_view(self, request):
        """The queue dashboard: per queue and per self-hosted environment, as of the database clock."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            refresh = values.count(request.GET.get("refresh", "0"), what="refresh", minimum=0)
        except InvalidInput:
            refresh = 0
        snap = dashboard.snapshot()
        can_control = self.has_operate_permission(request)
        editing = request.GET.get("edit", "") if can_control else ""
        regions = "#wq-asof-stamp|.wq-cards|#wq-queues|#wq-environments"
        context = {
            **self.admin_site.each_context(request),
            # Django 5.2's admin styles div.breadcrumbs; 6.x styles ol.breadcrumbs.
            "legacy_breadcrumbs": django.VERSION < (6, 0),
            "title": "Queue dashboard",
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "snapshot": snap,
            "flow_rows": self._flow_rows(request, snap, editing),
            "dashboard_url": reverse(f"{self.admin_site.name}:{self.opts.app_label}_dashboard"),
            "can_control": can_control,
            "controls_url": reverse(f"{self.admin_site.name}:{self.opts.app_label}_dashboard_controls"),
            "control_fields": controls.FIELDS,
            "refresh": min(max(refresh, 5), 300) if refresh else 0,
            "changelist_url": reverse(f"{self.admin_site.name}:workqueue_workitem_changelist"),
            "workers_url": reverse(f"{self.admin_site.name}:workqueue_worker_changelist"),
            "environments_url": reverse(f"{self.admin_site.name}:workqueue_environment_changelist"),
            "maintenance_url": reverse(f"{self.admin_site.name}:workqueue_maintenancerun_changelist"),
            "charts_url": reverse(f"{self.admin_site.name}:{self.opts.app_label}_dashboard_charts"),
            # The flow-control table updates too, but not while a row of it is being edited.
            **live_context(regions if editing else f"{regions}|#flow-control"),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/workqueue/dashboard.html", context)

    def _flow_rows(self, request, snap, editing: str) -> list[dict]:
        """The flow-control table's rows: the queue, whether its row is the one being edited,
        and a link to its history (the controls row's log entries) once it has one."""
        site = self.admin_site
        history = site.is_registered(QueueControl) and site.get_model_admin(QueueControl).has_view_permission(request)
        rows = []
        for q in snap.queues:
            changed = q.flow is not None and q.flow.changed_at is not None
            rows.append(
                {
                    "q": q,
                    "editing": q.name == editing,
                    "history": reverse(f"{site.name}:workqueue_queuecontrol_history", args=[q.name])
                    if history and changed
                    else None,
                }
            )
        return rows

    def charts_view(self, request):
        """Per queue or all: what settled, and wait and run percentiles, over the last hour (per
        minute) or the last week (per hour), from the rollup (workqueue.stats)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        snap = dashboard.snapshot()
        queues = [q.name for q in snap.queues]
        queue = request.GET.get("queue") or None
        if queue is not None and queue not in queues:
            queue = None  # an unknown name shows all queues rather than an empty chart
        range_name = request.GET.get("range", "hour")
        if range_name not in charts.RANGES:
            range_name = "hour"
        context = {
            **self.admin_site.each_context(request),
            "legacy_breadcrumbs": django.VERSION < (6, 0),
            "title": "Queue charts",
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "now": snap.now,
            "chart": charts.chart(queue=queue, range_name=range_name, now=snap.now, using=DEFAULT_DB_ALIAS),
            "queues": queues,
            "queue": queue,
            "ranges": [(name, spec[0]) for name, spec in charts.RANGES.items()],
            "range_name": range_name,
            "dashboard_url": reverse(f"{self.admin_site.name}:{self.opts.app_label}_dashboard"),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/workqueue/charts.html", context)

    # -- columns ----------------------------------------------------------------------

    @admin.display(description="state")
    def state_display(self, obj):
        if obj.state == State.QUEUED and getattr(obj, "queue_paused", False):
            return format_html(
                "{} {}",
                state_badge(obj.state, obj.outcome),
                badge("paused", "warn", "Its queue is paused: it waits, uncharged, until the queue is resumed"),
            )
        return state_badge(obj.state, obj.outcome)

    @admin.display(description="key")
    def key_display(self, obj):
        if len(obj.key) <= KEY_SHOWN:
            return obj.key
        return format_html('<span title="{}">{}…</span>', obj.key, obj.key[: KEY_SHOWN - 1])

    @admin.display(description="queue", ordering="queue")
    def queue_display(self, obj):
        return queue_chip(obj.queue, reverse(f"{self.admin_site.name}:workqueue_workitem_changelist"))

    @admin.display(description="when")
    def when_display(self, obj):
        """The one time that matters in the item's state: due (queued), its lease (running),
        or when it stopped."""
        if obj.state == State.QUEUED:
            return format_html("due {}", self.due_display(obj))
        if obj.state == State.STOPPED:
            return format_html("stopped {}", relative(obj.stopped_at, getattr(obj, "db_now", None)))
        return format_html("lease {}", self.lease_display(obj))

    @admin.display(description="attempts")
    def attempts_display(self, obj):
        text = f"{obj.attempts} / {obj.max_attempts}"
        if obj.reclaimed:
            return format_html('{} <span class="wq-quiet" title="Its previous holder\'s lease lapsed">↻</span>', text)
        return text

    @admin.display(description="lease")
    def lease_display(self, obj):
        if obj.lease_expires_at is None:
            return DASH
        text = lease_text(obj.lease_expires_at, getattr(obj, "db_now", None))
        stamp = timestamp(obj.lease_expires_at)
        if text.startswith("lapsed"):
            return format_html('<span class="wq-lapsed" title="{}">{}</span>', stamp, text)
        return format_html('<span title="{}">{}</span>', stamp, text)

    @admin.display(description="due")
    def due_display(self, obj):
        if obj.state != State.QUEUED:
            return DASH
        wait = seconds_between(getattr(obj, "db_now", None), obj.run_after)
        if wait is None:
            return DASH
        return relative(obj.run_after, getattr(obj, "db_now", None))

    @admin.display(description="age", ordering="-id")
    def age_display(self, obj):
        return format_html(
            '<span title="created {}">{}</span>',
            timestamp(obj.created_at),
            duration(seconds_between(getattr(obj, "db_now", None), obj.created_at)),
        )

    @admin.display(description="last error")
    def last_error_display(self, obj):
        return format_html('<pre class="wq-pre">{}</pre>', obj.last_error) if obj.last_error else DASH

    @admin.display(description="timeline")
    def attempts_timeline(self, obj):
        """One row per attempt, oldest first: the log of those that ended otherwise than by
        success, and the row's own (under way, or the one that ended it)."""
        rows = attempts.timeline(obj)
        if not rows:
            return format_html('<span class="wq-quiet">{}</span>', "No attempt yet.")
        return format_html(
            '<table class="wq-timeline"><thead><tr><th scope="col">#</th><th scope="col">started</th>'
            '<th scope="col">worker</th><th scope="col">ended</th><th scope="col">ran</th>'
            '<th scope="col">outcome</th><th scope="col">error</th></tr></thead><tbody>{}</tbody></table>',
            format_html_join(
                "",
                '<tr class="wq-attempt">' + "<td>{}</td>" * 7 + "</tr>",
                (
                    (
                        a.number,
                        timestamp(a.started_at) if a.started_at else DASH,
                        a.worker or DASH,
                        timestamp(a.ended_at) if a.ended_at else DASH,
                        duration(a.seconds) if a.seconds is not None else DASH,
                        a.outcome,
                        format_html('<pre class="wq-pre">{}</pre>', a.error) if a.error else DASH,
                    )
                    for a in rows
                ),
            ),
        )

    @admin.display(description="metadata")
    def metadata_display(self, obj):
        return format_html('<pre class="wq-pre">{}</pre>', json.dumps(obj.metadata, indent=2, sort_keys=True))

    @admin.display(description="trace context")
    def trace_context_display(self, obj):
        if obj.trace_context is None:
            return DASH
        return format_html('<pre class="wq-pre">{}</pre>', json.dumps(obj.trace_context, indent=2, sort_keys=True))

    # -- actions ----------------------------------------------------------------------

    def has_operate_permission(self, request):
        """Moving items (requeue, force stop) takes the model's change permission."""
        codename = get_permission_codename("change", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def _selected_ids(self, request, queryset) -> list[int] | None:
        ids = list(queryset.order_by().values_list("pk", flat=True)[: MAX_ACTION_ITEMS + 1])
        if len(ids) > MAX_ACTION_ITEMS:
            self.message_user(
                request,
                f"That selects more than {MAX_ACTION_ITEMS:,} work items; narrow the filters and try again. "
                "Nothing was changed.",
                messages.ERROR,
            )
            return None
        return ids

    def _report(self, request, verb: str, changed: int, selected: int, left_alone: str) -> None:
        noun = "work item" if changed == 1 else "work items"
        text = f"{verb} {changed:,} {noun}."
        if selected > changed:
            text += f" {selected - changed:,} of the {selected:,} selected {left_alone} and were left as they were."
        self.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)

    @admin.action(description="Requeue now (ready at once; holders lose their leases)", permissions=["operate"])
    def requeue_now(self, request, queryset):
        ids = self._selected_ids(request, queryset)
        if ids is not None:
            changed = WorkItem.objects.requeue_now(ids)
            self._report(request, "Requeued", len(changed), len(ids), "were stopping or stopped")

    @admin.action(description="Force stop (settle as cancelled; holders lose their leases)", permissions=["operate"])
    def force_stop(self, request, queryset):
        ids = self._selected_ids(request, queryset)
        if ids is not None:
            changed = WorkItem.objects.force_stop(ids)
            self._report(request, "Force-stopped", len(changed), len(ids), "were already stopped")

    def _bulk(self, request, queryset, verb: str, noun: str, change) -> None:
        """Apply ``change`` to the first BULK_ACTION_CAP matching items (oldest first) and say
        how many changed, and whether the cap left some for another run."""
        ids = list(queryset.order_by("id").values_list("pk", flat=True)[: BULK_ACTION_CAP + 1])
        capped = len(ids) > BULK_ACTION_CAP
        changed = len(change(ids[:BULK_ACTION_CAP])) if ids else 0
        text = f"{verb} {changed:,} {noun} item{'s' if changed != 1 else ''}."
        if capped:
            text += (
                f" More than {BULK_ACTION_CAP:,} matched: one run changes at most {BULK_ACTION_CAP:,} (the oldest); "
                "run the action again for the rest."
            )
        self.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)

    @admin.action(description="Retry now (failed items: a new run, attempts reset)", permissions=["operate"])
    def retry_now(self, request, queryset):
        self._bulk(request, queryset.failed(), "Retried", "failed", WorkItem.objects.retry_now)

    @admin.action(description="Run now (scheduled items: due at once)", permissions=["operate"])
    def run_now(self, request, queryset):
        self._bulk(request, queryset.scheduled(), "Made due", "scheduled", WorkItem.objects.run_now)
