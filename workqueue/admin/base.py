"""What the work queue's admin pages share: badges, the estimated-count paginator, the guards
every view goes through, the lean change list, and the list filters."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin import widgets
from django.contrib.admin.utils import get_fields_from_path, quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest, PermissionDenied
from django.core.paginator import Paginator
from django.db import models
from django.db.models import QuerySet
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property

from workqueue import handlers
from workqueue.admin import snapshot as dashboard
from workqueue.conf import wq_settings
from workqueue.exceptions import InvalidInput
from workqueue.models import (
    Outcome,
    State,
)
from workqueue.templatetags.workqueue_admin import DASH, badge, duration, timestamp

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
    """The badge of a work item's state; once stopped, its outcome alone (compact: a stopped
    item's outcome says it stopped), the two together on hover."""
    if state == State.STOPPED and outcome:
        return badge(outcome, OUTCOME_TONES[outcome], f"{state} · {outcome}")
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


def _stamp_display(name: str, label: str):
    @admin.display(description=label, ordering=name)
    def shown(obj):
        return timestamp(getattr(obj, name))

    return shown


def _flag_display(name: str, label: str):
    @admin.display(description=label, ordering=name)
    def shown(obj):
        return "yes" if getattr(obj, name) else ""  # False is nothing, not a red cross

    return shown


class ConsistentFormatsMixin:
    """One way to write an instant and a flag on every page of both apps: a read-only
    DateTimeField (on a page or in a list) is written by ``timestamp`` (seconds and zone), a
    read-only BooleanField as "yes" or nothing (Django's red ✗ reads as an error), an empty
    value as DASH."""

    empty_value_display = DASH

    def _formatted(self, name):
        if not isinstance(name, str):
            return name
        try:
            field = self.model._meta.get_field(name)  # type: ignore[attr-defined]
        except Exception:
            return name
        if isinstance(field, models.DateTimeField):
            make = _stamp_display
        elif isinstance(field, models.BooleanField):
            make = _flag_display
        else:
            return name
        shown = f"{name}_shown"  # no "__": the admin reads that as a relation
        if not hasattr(self, shown):
            setattr(self, shown, make(name, str(field.verbose_name)))
        return shown

    def _format_row(self, row, readonly):
        if isinstance(row, list | tuple):
            return tuple(self._format_row(f, readonly) for f in row)
        return self._formatted(row) if row in readonly else row

    def with_formats(self, readonly) -> list:
        """A read-only field list with the formatted stand-ins of its instants and flags."""
        readonly = list(readonly)
        return readonly + [self._formatted(f) for f in readonly if self._formatted(f) != f]

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)  # type: ignore[misc]
        readonly = set(self.get_readonly_fields(request, obj))
        if obj is not None and not self.has_change_permission(request, obj):  # type: ignore[attr-defined]
            readonly |= {f for _, opts in fieldsets for row in opts["fields"] for f in _flat(row)}
        return [(title, {**opts, "fields": self._format_row(opts["fields"], readonly)}) for title, opts in fieldsets]

    def get_readonly_fields(self, request, obj=None):
        return self.with_formats(super().get_readonly_fields(request, obj))  # type: ignore[misc]

    def get_list_display(self, request):
        return [self._formatted(f) for f in super().get_list_display(request)]  # type: ignore[misc]

    def get_list_display_links(self, request, list_display):
        links = super().get_list_display_links(request, list_display)  # type: ignore[misc]
        return [self._formatted(f) for f in links] if links else links


def _flat(row):
    return row if isinstance(row, list | tuple) else (row,)


class GuardedModelAdmin(ConsistentFormatsMixin, admin.ModelAdmin):
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


#: How often a live page (the dashboard, the work-item list, the Workers page) refetches itself.
LIVE_EVERY_SECONDS = 5


def live_context(regions: str) -> dict[str, Any]:
    """What a page's live toggle needs (admin/workqueue/_live.html): the CSS selectors of the
    parts workqueue/live.js swaps in place, separated by "|", and how often."""
    return {"live_regions": regions, "live_every": LIVE_EVERY_SECONDS}


class LiveListMixin:
    """A change list that keeps itself current in place (workqueue/live.js): its rows and its
    paginator are refetched every few seconds, unless the operator has ticked rows for an action."""

    live_regions = ".results|.paginator"

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(  # type: ignore[misc]
            request, extra_context={**live_context(self.live_regions), **(extra_context or {})}
        )


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


@dataclass(frozen=True)
class ObjectAction:
    """A button on one row's page: ``allowed(obj)`` says whether the row's state admits it;
    ``explain`` is what the confirmation page says it will do.

    ``param`` names a value the action needs (e.g. a workflow's ``from_step``): it comes in the
    link's query string (``object_action_url(obj, name, value)``), is carried by the
    confirmation form and reaches ``run_object_action`` as ``request.POST[param]``. Such an
    action is linked from where its value is (a step's row), not among the page's buttons;
    its ``explain`` may be ``fn(obj, value)``."""

    name: str
    label: str
    explain: str | Callable[[Any, str | None], str]
    allowed: Callable[[Any], bool]
    param: str | None = None

    def explained(self, obj, value: str | None) -> str:
        return self.explain(obj, value) if callable(self.explain) else self.explain


def _param(request, name: str | None) -> str | None:
    """An action's value: the link's query string on the confirmation, the form's on the POST."""
    if name is None:
        return None
    return (request.POST if request.method == "POST" else request.GET).get(name)


class ObjectActionsMixin:
    """Actions on a row's own page, each confirmed and each a POST with its CSRF token.

    The page links to ``<id>/do/<name>/``: a GET there is the confirmation page (a form with
    one button; no script, so it works with JavaScript off and under a strict CSP), its POST
    runs :meth:`run_object_action` (a verb of the managers or service modules) and returns to
    the row's page. Both need :meth:`has_object_action_permission` (403 otherwise), and a
    state that admits the action (else a message, and nothing changes).
    """

    object_actions: tuple[ObjectAction, ...] = ()

    def has_object_action_permission(self, request) -> bool:
        raise NotImplementedError

    def run_object_action(self, request, obj, name: str) -> str | tuple[str, str]:
        """Run the action; return what to tell the operator, or (that, the page to go to
        instead of the row's); raise InvalidInput to refuse."""
        raise NotImplementedError

    def object_action_url(self, obj, name: str, value=None) -> str:
        """The confirmation page of action ``name`` on ``obj`` (with its param's ``value``)."""
        opts = self.opts  # type: ignore[attr-defined]
        url = reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_do", args=[quote(obj.pk), name])  # type: ignore[attr-defined]
        chosen = next(a for a in self.object_actions if a.name == name)
        return f"{url}?{urlencode({chosen.param: value})}" if chosen.param else url

    def object_action_links(self, request, obj) -> list[dict]:
        if obj is None or not self.has_object_action_permission(request):
            return []
        return [
            {"label": a.label, "explain": a.explained(obj, None), "url": self.object_action_url(obj, a.name)}
            for a in self.object_actions
            if a.param is None and a.allowed(obj)  # one that needs a value is linked from where it is
        ]

    def object_action_urls(self) -> list:
        opts = self.opts  # type: ignore[attr-defined]
        return [
            path(
                "<path:object_id>/do/<str:action>/",
                self.admin_site.admin_view(self.object_action_view),  # type: ignore[attr-defined]
                name=f"{opts.app_label}_{opts.model_name}_do",
            )
        ]

    def object_action_view(self, request, object_id, action):
        if not self.has_object_action_permission(request):
            raise PermissionDenied
        opts = self.opts  # type: ignore[attr-defined]
        obj = self.get_object(request, unquote(object_id))  # type: ignore[attr-defined]
        if obj is None:
            return self._get_obj_does_not_exist_redirect(request, opts, object_id)  # type: ignore[attr-defined]
        back = reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)])  # type: ignore[attr-defined]
        chosen = next((a for a in self.object_actions if a.name == action), None)
        if chosen is None:
            raise Http404(f"no action {action!r}")
        if not chosen.allowed(obj):
            self.message_user(  # type: ignore[attr-defined]
                request, f"{chosen.label}: not possible in its state; nothing was changed.", messages.WARNING
            )
            return HttpResponseRedirect(back)
        value = _param(request, chosen.param)
        if chosen.param and not value:
            self.message_user(request, f"{chosen.label}: say which {chosen.param}; nothing changed.", messages.ERROR)  # type: ignore[attr-defined]
            return HttpResponseRedirect(back)
        if request.method == "GET":
            context = {
                **self.admin_site.each_context(request),  # type: ignore[attr-defined]
                "title": f"{chosen.label}: {obj}",
                "opts": opts,
                "object": obj,
                "action": chosen,
                "explain": chosen.explained(obj, value),
                "param": chosen.param,
                "value": value,
                "back": back,
            }
            request.current_app = self.admin_site.name  # type: ignore[attr-defined]
            return TemplateResponse(request, "admin/workqueue/object_action_confirm.html", context)
        if request.method != "POST":
            return HttpResponseNotAllowed(["GET", "POST"])
        try:
            said = self.run_object_action(request, obj, chosen.name)
        except InvalidInput as exc:
            self.message_user(request, f"{chosen.label}: {exc}. Nothing was changed.", messages.ERROR)  # type: ignore[attr-defined]
            return HttpResponseRedirect(back)
        said, then = said if isinstance(said, tuple) else (said, back)
        self.log_change(request, obj, said)  # type: ignore[attr-defined]
        self.message_user(request, said, messages.SUCCESS)  # type: ignore[attr-defined]
        return HttpResponseRedirect(then)
