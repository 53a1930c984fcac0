"""Admin for the work queue: the queue dashboard, work items, environments, API keys, workers, sweeps.

Read-mostly. A work item's state moves only through the queue's verbs (the "Requeue now" and
"Force stop" actions call ``WorkItem.objects.requeue_now`` / ``force_stop``); keys are minted by
``workqueue.environments`` and shown once. Every list stays cheap on a table of millions of
rows: no unbounded ``COUNT(*)`` (``EstimatedCountPaginator``), no facet counts, no ``DISTINCT``
filters, and relative times come from the database clock (``db_now`` on every row).
"""

from __future__ import annotations

import functools
import json

import django
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import widgets
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.utils import get_fields_from_path, quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_permission_codename
from django.core.exceptions import BadRequest, PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Now
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.cache import add_never_cache_headers, patch_cache_control
from django.utils.functional import cached_property
from django.utils.html import format_html

from workqueue import controls, dashboard, handlers, values
from workqueue.conf import format_rate, wq_settings
from workqueue.environments import create_api_key, create_environment, rotate_environment_key
from workqueue.exceptions import InvalidInput
from workqueue.models import (
    ApiKey,
    Environment,
    MaintenanceRun,
    Outcome,
    QueueControl,
    QueueDashboard,
    State,
    Worker,
    WorkItem,
)
from workqueue.templatetags.workqueue_admin import DASH, badge, duration, lease_text, seconds_between

#: Badge tone of each state; a stopped item takes the tone of its outcome.
STATE_TONES: dict[str, str] = {
    State.QUEUED: "info",
    State.STARTING: "ok",
    State.ACTIVE: "ok",
    State.STOPPING: "warn",
    State.STOPPED: "quiet",
}
OUTCOME_TONES: dict[str, str] = {
    Outcome.SUCCEEDED: "quiet",
    Outcome.FAILED: "error",
    Outcome.CANCELLED: "warn",
    Outcome.STOPPED: "quiet",
}
#: An action refuses selections larger than this (narrow the filter instead).
MAX_ACTION_ITEMS = 10_000
#: The bulk actions "retry now" and "run now" change at most this many items per run (the
#: oldest first), so one over a million-row filter never times out; run it again for more.
BULK_ACTION_CAP = 5_000


def state_badge(state: str, outcome: str | None = None) -> str:
    """The badge of a work item's state (with its outcome once stopped)."""
    if state == State.STOPPED and outcome:
        return badge(f"{state} · {outcome}", OUTCOME_TONES[outcome])
    return badge(state, STATE_TONES[state])


class EstimatedCountPaginator(Paginator):
    """A paginator that never counts more than ``exact_up_to + 1`` rows.

    Unfiltered, a large table's size comes from ``pg_class.reltuples`` (no COUNT at all);
    otherwise rows are counted up to the bound, and past it the planner's estimate for the
    filtered query is shown as "about N".
    """

    exact_up_to = 10_000
    estimated = False

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        assert isinstance(qs, QuerySet), "the admin paginates querysets"
        unfiltered = not qs.query.where
        estimate = dashboard.table_estimate(qs.model._meta.db_table, using=qs.db) if unfiltered else None
        if estimate is not None and estimate > self.exact_up_to:
            self.estimated = True
            return estimate
        # Small, never analyzed, or filtered: count, but never past the bound. (A stale small
        # estimate must not stand: the admin lists every row at once when it thinks they fit.)
        counted = qs.order_by()[: self.exact_up_to + 1].count()
        if counted <= self.exact_up_to:
            return counted
        self.estimated = True
        if not unfiltered:
            plan = json.loads(qs.order_by().explain(format="json"))
            estimate = int(plan[0]["Plan"]["Plan Rows"])
        return max(estimate or 0, counted)


def _has_nul(values) -> bool:
    return any("\x00" in v for v in values if isinstance(v, str))


def checks_its_own_ids(view):
    """Mark an admin view that answers a bad object id itself (e.g. in a JSON error envelope),
    so the NUL guard leaves the path to it; query and form parameters are still guarded."""
    view.checks_its_own_ids = True
    return view


def _guard(view):
    """Refuse text PostgreSQL cannot take before a view turns it into a query: a NUL byte in
    any query or form parameter (name or value) is a 400, in an object id a 404."""

    @functools.wraps(view)
    def guarded(request, *args, **kwargs):
        for params in (request.GET, request.POST) if request.method == "POST" else (request.GET,):
            for name, given in params.lists():
                if "\x00" in name or _has_nul(given):
                    raise BadRequest("a query or form parameter holds a NUL byte")
        if not getattr(view, "checks_its_own_ids", False) and (_has_nul(args) or _has_nul(kwargs.values())):
            raise Http404("no object has an id with a NUL byte")
        return view(request, *args, **kwargs)

    return guarded


class GuardedModelAdmin(admin.ModelAdmin):
    """The base of every ModelAdmin of both apps: bad input is a 400 or a 404, never a 500.

    - Every URL the admin serves for this model (its own and any ``get_urls()`` adds) refuses
      a NUL byte in a parameter (400) or an object id (404): PostgreSQL text cannot hold one,
      so it would otherwise reach the database as an error.
    - ``?field__lookup=`` reaches only the lookups the change list's own filters use
      (:meth:`filter_parameters`); any other is Django's 400 (``DisallowedModelAdminLookup``).
      Django would otherwise allow a lookup on any local field: a prefix oracle on stored key
      hashes (``key_hash__startswith``), a search of what the apps never show (``request``),
      or an unindexed scan (``metadata__icontains``) of a table of millions of rows.
    """

    @property
    def urls(self):
        patterns = self.get_urls()
        for pattern in patterns:
            if isinstance(pattern, URLPattern):
                pattern.callback = _guard(pattern.callback)
        return patterns

    def filter_parameters(self, request) -> set[str]:
        """The query parameters this change list's filters read, as their own links write them."""
        names: set[str] = set()
        for item in self.get_list_filter(request):
            if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
                if item.parameter_name:
                    names.add(item.parameter_name)
                continue
            path = item[0] if isinstance(item, list | tuple) else item
            if not isinstance(path, str):
                continue  # a Field object given directly: none of ours
            field = get_fields_from_path(self.model, path)[-1]
            # What Django's field filters read: choices and boolean `{path}__exact`, all-values
            # `{path}`, related `{path}__{pk}__exact`, and each `{path}__isnull`.
            names |= {path, f"{path}__exact", f"{path}__isnull"}
            target = getattr(field, "target_field", None)
            if field.is_relation and target is not None:
                names.add(f"{path}__{target.name}__exact")
        return names

    def lookup_allowed(self, lookup, value, request=None):
        if request is not None and lookup in self.filter_parameters(request):
            return True
        # Django's own allowance for a raw-id popup's limit_choices_to (another admin's widget).
        for fk_lookup in self.model._meta.related_fkey_lookups:
            if callable(fk_lookup):
                fk_lookup = fk_lookup()
            if (lookup, value) in widgets.url_params_from_lookup_dict(fk_lookup).items():
                return True
        return False


class LeanChangeList(ChangeList):
    """A change list that leaves out the columns its rows never show (``list_defer``)."""

    def get_queryset(self, request, exclude_parameters=None):
        queryset = super().get_queryset(request, exclude_parameters)
        list_defer = getattr(self.model_admin, "list_defer", ())  # FastListMixin's, when it has one
        return queryset.defer(*list_defer) if list_defer else queryset


class FastListMixin:
    """Change list settings that keep a list of millions of rows to bounded queries."""

    paginator: type[Paginator] = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    #: Large columns the change list never shows (the change page still reads them).
    list_defer: tuple[str, ...] = ()

    def get_changelist(self, request, **kwargs):
        return LeanChangeList


class ReadOnlyMixin:
    """Rows written by the queue itself: viewable, never added, edited or deleted here."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class StuckFilter(admin.SimpleListFilter):
    """Stuck items (WorkItemQuerySet.stuck()) and, narrower, those with a lapsed lease (lapsed())."""

    title = "health"
    parameter_name = "stuck"

    def lookups(self, request, model_admin):
        minutes = duration(wq_settings().stuck_after)
        return [
            ("yes", f"Stuck (lapsed lease, or queued {minutes} past due)"),
            ("lapsed", "Lapsed lease"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.stuck()
        if self.value() == "lapsed":
            return queryset.lapsed()
        return queryset


class SituationFilter(admin.SimpleListFilter):
    """The dashboard's columns, each a WorkItemQuerySet scope."""

    title = "situation"
    parameter_name = "situation"
    SCOPES = {
        "ready": "Ready (due, not reserved)",
        "scheduled": "Scheduled (run_after ahead)",
        "pending": "Pending (polled, not acked)",
        "running": "Running (starting or active)",
        "stopping": "Stopping",
        "succeeded": "Succeeded",
        "failed": "Failed",
    }

    def lookups(self, request, model_admin):
        return list(self.SCOPES.items())

    def queryset(self, request, queryset):
        value = self.value()
        if value is not None and value in self.SCOPES:
            return getattr(queryset, value)()
        return queryset


class QueueFilter(admin.SimpleListFilter):
    """Queues from the settings and the handler registry (never a DISTINCT over the table)."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        names = set(wq_settings().queues) | set(handlers.queues())
        value = self.value()
        if value:
            names.add(value)
        return [(name, name) for name in sorted(names)]

    def queryset(self, request, queryset):
        return queryset.filter(queue=self.value()) if self.value() else queryset


@admin.register(WorkItem)
class WorkItemAdmin(FastListMixin, ReadOnlyMixin, GuardedModelAdmin):
    list_display = (
        "key_display",
        "state_display",
        "queue",
        "environment",
        "priority",
        "attempts_display",
        "lease_display",
        "due_display",
        "age_display",
    )
    list_display_links = ("key_display",)
    list_filter = ("state", StuckFilter, SituationFilter, QueueFilter, "environment")
    list_select_related = ("environment",)
    list_defer = ("last_error", "metadata", "trace_context")
    sortable_by = ("age_display",)
    search_fields = ("public_id", "key")
    search_help_text = "An exact work id (work_…) or key."
    actions = ("requeue_now", "force_stop", "retry_now", "run_now")
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
    )

    def get_queryset(self, request):
        # One database "now" per statement: every relative time on the page uses it. A
        # queued item of a paused queue shows as paused (one primary-key probe per row).
        paused = QueueControl.objects.filter(queue=OuterRef("queue"), paused=True)
        return super().get_queryset(request).annotate(db_now=Now(), queue_paused=Exists(paused))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), "has_operate_permission": self.has_operate_permission(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        # Exact matches only: public_id is unique-indexed; a LIKE over millions of keys is not.
        return queryset.filter(Q(public_id=term) | Q(key=term)), False

    def get_urls(self):
        urls = [
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name=f"{self.opts.app_label}_dashboard",
            ),
            path(
                "dashboard/controls/",
                self.admin_site.admin_view(self.controls_view),
                name=f"{self.opts.app_label}_dashboard_controls",
            ),
        ]
        return urls + super().get_urls()

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
            return HttpResponseRedirect(back)
        row = QueueControl.objects.get(pk=control.queue)
        self.log_change(request, row, message)
        self.message_user(request, f"{control.queue}: {message}", messages.SUCCESS)
        return HttpResponseRedirect(back)

    def dashboard_view(self, request):
        """The queue dashboard: per queue and per self-hosted environment, as of the database clock."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            refresh = values.count(request.GET.get("refresh", "0"), what="refresh", minimum=0)
        except InvalidInput:
            refresh = 0
        context = {
            **self.admin_site.each_context(request),
            # Django 5.2's admin styles div.breadcrumbs; 6.x styles ol.breadcrumbs.
            "legacy_breadcrumbs": django.VERSION < (6, 0),
            "title": "Queue dashboard",
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "snapshot": dashboard.snapshot(),
            "can_control": self.has_operate_permission(request),
            "controls_url": reverse(f"{self.admin_site.name}:{self.opts.app_label}_dashboard_controls"),
            "control_fields": controls.FIELDS,
            "refresh": min(max(refresh, 5), 300) if refresh else 0,
            "changelist_url": reverse(f"{self.admin_site.name}:workqueue_workitem_changelist"),
            "workers_url": reverse(f"{self.admin_site.name}:workqueue_worker_changelist"),
            "environments_url": reverse(f"{self.admin_site.name}:workqueue_environment_changelist"),
            "maintenance_url": reverse(f"{self.admin_site.name}:workqueue_maintenancerun_changelist"),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/workqueue/dashboard.html", context)

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
        if len(obj.key) <= 48:
            return obj.key
        return format_html('<span title="{}">{}…</span>', obj.key, obj.key[:47])

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
        if text.startswith("lapsed"):
            return format_html('<span class="wq-lapsed" title="{}">{}</span>', obj.lease_expires_at, text)
        return format_html('<span title="{}">{}</span>', obj.lease_expires_at, text)

    @admin.display(description="due")
    def due_display(self, obj):
        if obj.state != State.QUEUED:
            return DASH
        wait = seconds_between(getattr(obj, "db_now", None), obj.run_after)
        if wait is None:
            return DASH
        return f"in {duration(wait)}" if wait < 0 else ("now" if wait < 1 else f"{duration(wait)} ago")

    @admin.display(description="age", ordering="-id")
    def age_display(self, obj):
        return duration(seconds_between(getattr(obj, "db_now", None), obj.created_at))

    @admin.display(description="last error")
    def last_error_display(self, obj):
        return format_html('<pre class="wq-pre">{}</pre>', obj.last_error) if obj.last_error else DASH

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


@admin.register(QueueDashboard)
class QueueDashboardAdmin(GuardedModelAdmin):
    """The queue dashboard's entry in the admin index and sidebar; it leads to the dashboard.

    Listed for whoever may view work items (the dashboard's own test); it adds, changes and
    deletes nothing, so it has no permissions of its own.
    """

    def _may_view(self, request) -> bool:
        try:
            work_items = self.admin_site.get_model_admin(WorkItem)
        except NotRegistered:
            return False
        return work_items.has_view_permission(request)

    def has_view_permission(self, request, obj=None):
        return self._may_view(request)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_model_perms(self, request):
        # The Work queue app page already opens with the dashboard (its app_index template):
        # list the entry everywhere else, not twice there.
        match = request.resolver_match
        on_app_page = match is not None and match.url_name == "app_list"
        return {"add": False, "change": False, "delete": False, "view": self._may_view(request) and not on_app_page}

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(self, request, extra_context=None):
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:{self.opts.app_label}_dashboard"))


class KeyCreatingAdmin(GuardedModelAdmin):
    """Create rows whose key is minted by ``workqueue.environments``: shown once, stored hashed."""

    create_fields: tuple[str, ...] = ("name",)
    key_noun = "key"

    def create(self, cleaned_data):  # -> (obj, key)
        raise NotImplementedError

    def get_fields(self, request, obj=None):
        return self.create_fields if obj is None else super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        if change:
            # Only what the form edits: a full save could undo a key rotated meanwhile.
            columns = {f.name for f in type(obj)._meta.concrete_fields}
            changed = [f for f in form.changed_data if f in form.fields and f in columns]  # m2m: save_related
            if changed:
                obj.save(update_fields=changed)
            return
        created, key = self.create(form.cleaned_data)
        for f in type(obj)._meta.concrete_fields:
            setattr(obj, f.attname, getattr(created, f.attname))
        obj._state.adding, obj._state.db = False, created._state.db
        request._workqueue_new_key = key  # shown by response_add, on the response itself

    def response_add(self, request, obj, post_url_continue=None):
        key = getattr(request, "_workqueue_new_key", None)
        if key is None:
            return super().response_add(request, obj, post_url_continue)
        return self.show_key(request, obj, key, title=f"{str(self.opts.verbose_name).capitalize()} added")

    def show_key(self, request, obj, key: str, *, title: str):
        """Render the key on this response, never through messages (a cookie by default) or
        the session: it exists only in this page, which no cache may keep."""
        context = {
            **self.admin_site.each_context(request),
            "legacy_breadcrumbs": django.VERSION < (6, 0),
            "title": title,
            "subtitle": str(obj),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "original": obj,
            "key": key,
            "key_noun": self.key_noun,
            "change_url": reverse(
                f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change", args=[quote(obj.pk)]
            ),
        }
        request.current_app = self.admin_site.name
        response = TemplateResponse(request, "admin/workqueue/key_shown.html", context)
        add_never_cache_headers(response)
        patch_cache_control(response, no_store=True)
        return response

    @admin.display(description="key")
    def key_hint_display(self, obj):
        return format_html('<code title="The key\'s first characters">{}…</code>', obj.key_hint)


@admin.register(Environment)
class EnvironmentAdmin(KeyCreatingAdmin):
    list_display = ("name", "kind", "id", "key_hint_display", "created_at", "key_rotated_at")
    list_filter = ("kind",)
    search_fields = ("name", "=id")
    create_fields = ("name", "kind")
    fields = ("id", "name", "kind", "key_hint_display", "created_at", "key_rotated_at")
    readonly_fields = ("id", "kind", "key_hint_display", "created_at", "key_rotated_at")
    key_noun = "environment key"

    def create(self, cleaned_data):
        return create_environment(cleaned_data["name"], cleaned_data["kind"])

    def get_urls(self):
        return [
            path(
                "<path:object_id>/rotate-key/",
                self.admin_site.admin_view(self.rotate_key_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_rotate_key",
            ),
            *super().get_urls(),
        ]

    def rotate_key_view(self, request, object_id):
        """Confirm, then give the environment a new key (shown once); the old key stops working."""
        env = self.get_object(request, unquote(object_id))
        if env is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]  # Django's, missing from the stubs
        if not self.has_change_permission(request, env):
            raise PermissionDenied
        change_url = reverse(f"{self.admin_site.name}:workqueue_environment_change", args=[quote(env.pk)])
        if request.method == "POST":
            key = rotate_environment_key(env)
            self.log_change(request, env, "Rotated the environment key.")
            return self.show_key(request, env, key, title="Environment key rotated")
        context = {
            **self.admin_site.each_context(request),
            # Django 5.2's admin styles div.breadcrumbs; 6.x styles ol.breadcrumbs.
            "legacy_breadcrumbs": django.VERSION < (6, 0),
            "title": "Rotate the environment key?",
            "subtitle": str(env),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "original": env,
            "change_url": change_url,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/workqueue/environment/rotate_key.html", context)


class ApiKeyAddForm(forms.ModelForm):
    """The new key's scope, chosen explicitly: its environments, or site-wide (never both, never
    neither). Site-wide is decided here, once; no later change widens a key."""

    site_wide = forms.BooleanField(
        required=False,
        label="Site-wide",
        help_text="Valid for every environment, those created later too. Leave it off and choose environments "
        "to limit the key to them.",
    )

    class Meta:
        model = ApiKey
        fields = ("name", "site_wide", "environments")

    def clean(self):
        data = super().clean()
        assert data is not None  # ModelForm.clean returns cleaned_data
        chosen = data.get("environments")
        if data.get("site_wide") and chosen:
            raise forms.ValidationError("Choose the key's environments or make it site-wide, not both.")
        if not data.get("site_wide") and not chosen and "environments" not in self.errors:
            raise forms.ValidationError(
                "Choose the environments this key may act on, or tick Site-wide for a key valid everywhere."
            )
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(KeyCreatingAdmin):
    list_display = ("name", "key_hint_display", "status_display", "environments_display", "created_at")
    list_filter = ("revoked", "site_wide")
    search_fields = ("name",)
    create_fields = ("name", "site_wide", "environments")
    fields = ("name", "environments_display", "environments", "key_hint_display", "status_display", "created_at")
    readonly_fields = ("environments_display", "key_hint_display", "status_display", "created_at")
    filter_horizontal = ("environments",)
    actions = ("revoke",)
    key_noun = "API key"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj is not None and obj.site_wide:
            # Valid everywhere by how it was created; narrow it by making a scoped key instead.
            return tuple(f for f in fields if f != "environments")
        return fields

    def create(self, cleaned_data):
        return create_api_key(
            cleaned_data["name"],
            environments=cleaned_data.get("environments") or (),
            site_wide=bool(cleaned_data.get("site_wide")),
        )

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("environments")

    def save_related(self, request, form, formsets, change):
        if change:  # on add, create() already set them
            super().save_related(request, form, formsets, change)

    @admin.display(description="scope")
    def environments_display(self, obj):
        scope = obj.scope()
        if not obj.site_wide and scope == "no environments":
            return badge(scope, "error", "Its environments were deleted: it acts on none (401)")
        return scope

    @admin.display(description="status", ordering="revoked")
    def status_display(self, obj):
        return badge("revoked", "error") if obj.revoked else badge("active", "ok")

    @admin.action(description="Revoke selected API keys (they stop working at once)", permissions=["change"])
    def revoke(self, request, queryset):
        revoked = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(request, f"Revoked {revoked:,} API key{'s' if revoked != 1 else ''}.", messages.SUCCESS)


@admin.register(Worker)
class WorkerAdmin(ReadOnlyMixin, GuardedModelAdmin):
    list_display = (
        "id",
        "status_display",
        "last_seen_display",
        "queues_display",
        "processed_display",
        "failed_display",
        "host",
        "pid",
    )
    list_filter = ("state", "host")
    search_fields = ("=id", "host")
    show_facets = admin.ShowFacets.NEVER

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(db_now=Now())

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

    @admin.display(description="processed", ordering="processed")
    def processed_display(self, obj):
        return f"{obj.processed:,}"

    @admin.display(description="failed", ordering="failed")
    def failed_display(self, obj):
        return f"{obj.failed:,}"

    @admin.display(description="last seen", ordering="-last_seen")
    def last_seen_display(self, obj):
        return format_html(
            '<span title="{}">{} ago</span>', obj.last_seen, duration(seconds_between(obj.db_now, obj.last_seen))
        )


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


from workqueue import admin_schedules  # noqa: E402, F401  (the Schedules admin; it uses the helpers above)


@admin.register(QueueControl)
class QueueControlAdmin(ReadOnlyMixin, GuardedModelAdmin):
    """Operators' runtime overrides, read-only here: change them on the queue dashboard or with
    ``manage.py queues``; each change is in the row's history."""

    list_display = (
        "queue",
        "paused",
        "max_running",
        "max_running_per_group",
        "rate_display",
        "rate_per_group_display",
        "updated_at",
        "updated_by",
    )
    empty_value_display = DASH

    def has_view_permission(self, request, obj=None):
        # Whoever may view work items may see the controls and their history.
        return request.user.has_perm("workqueue.view_workitem") or super().has_view_permission(request, obj)

    @admin.display(description="rate")
    def rate_display(self, obj):
        return format_rate((obj.rate_count, obj.rate_period) if obj.rate_count else None) or DASH

    @admin.display(description="rate per group")
    def rate_per_group_display(self, obj):
        rate = (obj.rate_per_group_count, obj.rate_per_group_period) if obj.rate_per_group_count else None
        return format_rate(rate) or DASH
