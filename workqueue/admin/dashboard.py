"""The queue dashboard page, and the queue controls (flow control) pages."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.http import HttpResponseRedirect
from django.urls import path, reverse

from workqueue.admin.base import (
    GuardedModelAdmin,
    ReadOnlyMixin,
)
from workqueue.conf import format_rate
from workqueue.models import (
    QueueControl,
    QueueDashboard,
    WorkItem,
)
from workqueue.templatetags.workqueue_admin import DASH


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
