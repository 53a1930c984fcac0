"""Admin for operations: progress bars, state badges, attempts, errors, a cancel action, and a
detail page that follows the operation live (Server-Sent Events from the process's watcher)."""

from __future__ import annotations

import functools
import json

from django.contrib import admin, messages
from django.db.models import Q
from django.http import Http404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join

from operations import admin_workflows, batches, service
from operations.conf import ops_settings
from operations.http import api_error, render, watch_response
from operations.models import PARENT_KINDS, Operation, State
from operations.runner import CODE_CANCELLED
from workqueue import values
from workqueue.admin import FastListMixin, GuardedModelAdmin, checks_its_own_ids, search
from workqueue.admin.base import ObjectAction, ObjectActionsMixin
from workqueue.exceptions import InvalidInput
from workqueue.templatetags.workqueue_admin import DASH, duration, relative, timestamp

#: An id longer than this is cut in the list.
ID_SHOWN = 12

STATE_COLORS: dict[str, str] = {
    State.PENDING: "#6b7280",
    State.RUNNING: "#2563eb",
    State.SUCCEEDED: "#16a34a",
    State.FAILED: "#dc2626",
    State.CANCELLED: "#a16207",
}


def state_badge(state: str) -> str:
    color = STATE_COLORS.get(state, "#6b7280")
    return format_html(
        '<span class="op-state" style="background:{};color:#fff;border-radius:9px;padding:1px 8px;'
        'font-size:11px;white-space:nowrap">{}</span>',
        color,
        state,
    )


def bar_colour(op: Operation) -> str:
    """The colour of an operation's progress bar: its state's (blue while it runs)."""
    return STATE_COLORS.get(op.state, STATE_COLORS[State.RUNNING])


def progress_bar(op: Operation) -> str:
    p = op.progress
    fraction = p.fraction()
    # "done" only for a success: a failed or cancelled operation did not get done.
    text = p.describe() or ("done" if op.state == State.SUCCEEDED else DASH)
    if fraction is None:
        # No denominator: a count and a label, never a bar that pretends to know the end.
        return format_html('<span class="op-progress-text">{}</span>', text)
    return format_html(
        '<div class="op-progress" title="{}" style="min-width:90px">'
        '<div style="background:var(--hairline-color,#ddd);border-radius:4px;height:8px;overflow:hidden">'
        '<div class="op-progress-fill" style="width:{}%;height:8px;background:{}"></div></div>'
        '<small class="op-progress-text">{}</small></div>',
        p.unit or text,
        f"{fraction * 100:.0f}",
        bar_colour(op),
        text,
    )


def _live_panel(op: Operation) -> dict:
    """The live panel as the page is served (what it shows with JavaScript off; live.js then
    keeps it current, in the same words): the progress, the bar's width and colour, the message."""
    p = op.progress
    fraction = p.fraction()
    parts = [part for part in (p.describe(), p.unit and f"now: {p.unit}") if part]
    return {
        "progress": " · ".join(parts),
        "message": p.message,
        "width": None if fraction is None else f"{fraction * 100:.1f}",
        "color": bar_colour(op),
    }


def _logged_time(text) -> str:
    """An attempt log's ISO instant in the admin's one format."""
    if not text:
        return DASH
    value = parse_datetime(text)
    return timestamp(value) if value is not None else str(text)


def _attempt_outcome(row: dict) -> str:
    """An attempt ended by a cancellation reads "cancelled", whatever outcome it recorded."""
    if row.get("error_code") == CODE_CANCELLED:
        return "cancelled"
    return row.get("outcome") or DASH


MASK = "••••"


def masked(value, names: frozenset[str]):
    """``value`` with every mapping entry whose key is in ``names`` (any case, any depth) shown as MASK."""
    if isinstance(value, dict):
        return {k: MASK if str(k).lower() in names else masked(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, names) for v in value]
    return value


def pretty_json(value) -> str:
    """A JSON value as the admin shows it: indented, keys sorted, the masked fields hidden."""
    if value is None:
        return DASH
    shown = masked(value, ops_settings().admin_masked_fields)
    return format_html('<pre class="wq-pre">{}</pre>', json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False))


class KindFilter(admin.SimpleListFilter):
    """Filter by kind, offering the kinds this process runs (no DISTINCT over the whole table)."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        from operations.registry import registry

        return [(kind, kind) for kind in [*registry.kinds(), *PARENT_KINDS]]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(kind=value) if value else queryset


class OwnerFilter(admin.SimpleListFilter):
    """Filter by owner: yours, or any owner by ``?owner=`` (or the search box's ``=owner``).

    No list of owners: finding the busiest would aggregate the whole table on every page.
    """

    title = "owner"
    parameter_name = "owner"

    def lookups(self, request, model_admin):
        choices = [(str(request.user.pk), "mine")]
        value = self.value()
        if value and value != str(request.user.pk):
            choices.append((value, value))
        return choices

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.owned_by(value) if value else queryset


@admin.register(Operation)
class OperationAdmin(ObjectActionsMixin, FastListMixin, GuardedModelAdmin):
    # What fits in 1280 px beside the sidebar and the filters; owner, batch and timing are on
    # the operation's page.
    list_display = [
        "id_display",
        "state_badge",
        "progress",
        "kind",
        "attempts_display",
        "error_code_display",
        "created_display",
    ]
    list_display_links = ["id_display"]
    list_filter = ["state", KindFilter, OwnerFilter, admin_workflows.WorkflowFilter]
    search_fields = ["=id", "=owner", "kind"]
    search_help_text = search.help_text("the request", "An exact id or owner, or a kind")
    list_per_page = 50
    list_defer = ("result_detail", "attempt_log", "error_message", "request")
    ordering = ["-created_at", "-id"]
    actions = ["cancel_operations"]
    # On the operation's own page (confirmed, POSTed; the change permission): service verbs.
    object_actions = (
        ObjectAction(
            "cancel",
            "Cancel",
            "A pending operation is cancelled now; a running one stops when its run next looks.",
            lambda op: not op.done and not op.cancel_requested,
        ),
        ObjectAction(
            "retry",
            "Retry",
            "A new operation of the same kind, owner and queue, with the same request, starts now; "
            "this one stays as it ended.",
            lambda op: op.state in (State.FAILED, State.CANCELLED) and not op.is_parent and not op.workflow,
        ),
        # Linked from each row of a workflow's step timeline (its from_step).
        ObjectAction("fork", "Fork from this step", admin_workflows.explain_fork, lambda op: op.workflow, "from_step"),
    )
    readonly_fields = [
        "id",
        "kind",
        "owner",
        "state_badge",
        "attempts_display",
        "cancel_requested",
        "error_display",
        "result_display",
        "timing",
        "queue",
        "priority",
        "revision",
        "worker_id",
        "claimed_until",
        "attempt_log_display",
        "family",
        "request_display",
    ]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "id",
                    "kind",
                    "owner",
                    "state_badge",
                    "attempts_display",
                    "cancel_requested",
                    "family",
                ]
            },
        ),
        ("Request", {"fields": ["request_display"]}),
        ("Outcome", {"fields": ["error_display", "result_display"]}),
        ("Timing", {"fields": ["timing", "claimed_until", "worker_id"]}),
        ("Queue", {"fields": ["queue", "priority", "revision"], "classes": ["collapse"]}),
        ("Attempts", {"fields": ["attempt_log_display"]}),
    ]
    change_form_template = "admin/operations/operation/change_form.html"
    children_per_page = 100

    def get_search_results(self, request, queryset, search_term):
        terms = search.parse(search_term)
        if terms.error:
            failed = Operation.objects.filter(state=State.FAILED).order_by("-created_at", "-id")  # operations_state_idx
            return search.recent_errors(queryset, failed, "error_message", terms.error), False
        if terms.pairs:  # an id or an owner may hold an "=" too (not a kind: no LIKE over the table)
            term = search_term.strip()
            found = Q(id=term) | Q(owner=term) | search.json_pairs("request", terms, partial=False)
            return queryset.filter(found), False
        return super().get_search_results(request, queryset, search_term)

    @admin.display(description="request")
    def request_display(self, op):
        """The request, pretty-printed, with OPERATIONS["ADMIN_MASKED_FIELDS"] masked."""
        return pretty_json(op.request)

    def has_object_action_permission(self, request) -> bool:
        return self.has_cancel_permission(request)

    def run_object_action(self, request, obj, name: str) -> str | tuple[str, str]:
        if name == "cancel":
            service.cancel(obj.id)
            return f"Asked {obj.id} to stop."
        if name == "fork":
            return admin_workflows.fork(obj, request.POST["from_step"])
        new = service.start(obj.kind, obj.request, owner=obj.owner, queue=obj.queue, priority=obj.priority)
        return f"Retried {obj.id} as {new.id}."

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # Never offered: reap deletes finished operations after OPERATIONS["RETENTION"] (a
        # batch with its children); an operator cancels, retries or forks one instead.
        return False

    def has_change_permission(self, request, obj=None):
        # Only the state machine moves an operation; the page is for reading and cancelling.
        return False

    @admin.display(description="id", ordering="id")
    def id_display(self, op):
        """The id's head (the whole id on hover and on the page): ids are 32 characters."""
        return format_html('<code title="{}">{}…</code>', op.id, op.id[:ID_SHOWN]) if len(op.id) > ID_SHOWN else op.id

    @admin.display(description="error", ordering="error_code")
    def error_code_display(self, op):
        return op.error_code or DASH

    @admin.display(description="created", ordering="created_at")
    def created_display(self, op):
        return relative(op.created_at)

    @admin.display(description="state", ordering="state")
    def state_badge(self, op):
        return state_badge(op.state)

    @admin.display(description="progress")
    def progress(self, op):
        return progress_bar(op)

    @admin.display(description="batch / chain")
    def family(self, op):
        """A child links to its parent; a then to the parent whose end started it; a parent counts."""
        if op.parent_id:
            return format_html(
                'child #{} of <a href="{}">{}</a>',
                (op.position or 0) + 1,
                reverse("admin:operations_operation_change", args=[op.parent_id]),
                op.parent_id,
            )
        if op.follows_id:
            return format_html(
                'then of <a href="{}">{}</a>',
                reverse("admin:operations_operation_change", args=[op.follows_id]),
                op.follows_id,
            )
        if op.is_parent:
            c = op.child_counts()
            return (
                f"{c['total']:,} children: {c['open']:,} open, {c['succeeded']:,} succeeded, "
                f"{c['failed']:,} failed, {c['cancelled']:,} cancelled"
            )
        return "—"

    @admin.display(description="attempts", ordering="attempts")
    def attempts_display(self, op):
        return f"{op.attempts} / {op.max_attempts}"

    @admin.display(description="error")
    def error_display(self, op):
        error = op.error
        if error is None:
            return "—"
        return format_html(
            "<code>{}</code> {}<br><small>{}</small>",
            error.code,
            error.message,
            "would have been retried" if error.retryable else "not retryable",
        )

    @admin.display(description="result")
    def result_display(self, op):
        result = op.result
        if result is None:
            return DASH
        detail = pretty_json(result.detail) if result.detail is not None else ""
        return format_html("{}{}", result.uri or "", detail)

    @admin.display(description="created → started → finished")
    def timing(self, op):
        parts: list[str] = [format_html("created {}", relative(op.created_at))]
        if op.started_at:
            parts.append(f"queued {duration((op.started_at - op.created_at).total_seconds())}")
        if op.started_at and op.finished_at:
            parts.append(f"ran {duration((op.finished_at - op.started_at).total_seconds())}")
        elif op.started_at:
            parts.append(f"running {duration((timezone.now() - op.started_at).total_seconds())}")
        return format_html_join(" · ", "{}", ((p,) for p in parts))

    @admin.display(description="attempt log")
    def attempt_log_display(self, op):
        rows = op.attempt_log or []
        if not rows:
            return "—"
        return format_html(
            "<table><tr><th>#</th><th>worker</th><th>started</th><th>finished</th><th>outcome</th>"
            "<th>error</th></tr>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                (
                    (
                        r.get("number", ""),
                        r.get("worker_id") or DASH,
                        _logged_time(r.get("started_at")),
                        _logged_time(r.get("finished_at")),
                        _attempt_outcome(r),
                        " ".join(filter(None, [r.get("error_code"), r.get("error_message")])),
                    )
                    for r in rows
                ),
            ),
        )

    def has_cancel_permission(self, request):
        return request.user.has_perm("operations.change_operation")

    @admin.action(description="Cancel selected operations", permissions=["cancel"])
    def cancel_operations(self, request, queryset):
        changed = 0
        for op_id in queryset.active().values_list("id", flat=True)[:1000]:
            service.cancel(op_id)
            changed += 1
        noun = "operation" if changed == 1 else "operations"
        self.message_user(
            request,
            f"Asked {changed:,} {noun} to stop: pending ones are cancelled now, running ones when their run looks.",
            messages.SUCCESS if changed else messages.WARNING,
        )

    def get_urls(self):
        return [
            path(
                "<path:object_id>/watch/",
                self.admin_site.admin_view(self.watch_view),
                name="operations_operation_watch",
            ),
            *self.object_action_urls(),
            *super().get_urls(),
        ]

    @checks_its_own_ids
    def watch_view(self, request, object_id):
        """The live panel's event stream; refusals (a bad id too) in the API's JSON error envelope."""
        if not self.has_view_permission(request):
            raise Http404
        try:
            op_id = service.check_id(object_id)
            return watch_response(request, op_id, owner=None, detail=True)  # counted against the user
        except Exception as exc:
            return api_error(exc, "admin watch").response()

    def _children_page(self, request, parent: Operation) -> dict:
        """One keyset page of a parent's children (one index scan, whatever their number)."""
        try:
            after = values.count(request.GET.get("after"), what="after", minimum=0)
        except InvalidInput:
            after = None  # the first page
        page, next_after = batches.children(parent.id, after=after, limit=self.children_per_page)
        rows = [
            {
                "position": (child.position or 0) + 1,
                "url": reverse("admin:operations_operation_change", args=[child.pk]),
                "id": child.id,
                "kind": child.kind,
                "state": state_badge(child.state),
                "progress": progress_bar(child),
                "error": child.error_code,
                "attempts": f"{child.attempts} / {child.max_attempts}",
            }
            for child in page
        ]
        then = batches.describe_then(Operation.objects.only("request").get(pk=parent.pk))
        return {
            "rows": rows,
            "next": f"?after={next_after}" if next_after is not None else None,
            "first": "?" if after is not None else None,
            "counts": parent.child_counts(),
            "then": then,
            "then_url": reverse("admin:operations_operation_change", args=[then["id"]]) if then else None,
            "then_started": then is not None and Operation.objects.filter(pk=then["id"]).exists(),
        }

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["object_actions"] = self.object_action_links(request, obj)
        if obj is not None:  # the row the change view already read: no second query for the panel
            context["watch_url"] = reverse("admin:operations_operation_watch", args=[obj.pk])
            context["op_done"] = obj.done
            context["op_snapshot"] = render(obj, detail=True)  # json_script encodes it
            # The live panel's bar takes the state's colour, as the list's bars do.
            context["op_state_colors"] = json.dumps(STATE_COLORS)
            context["op_live"] = _live_panel(obj)
            if obj.is_parent:
                context["op_children"] = self._children_page(request, obj)
            if obj.workflow:
                can_fork = self.has_object_action_permission(request)
                fork_url = functools.partial(self.object_action_url, obj, "fork") if can_fork else None
                context["op_workflow"] = admin_workflows.page_context(obj, fork_url=fork_url)
            context["op_graph"] = admin_workflows.dependency_graph(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)
