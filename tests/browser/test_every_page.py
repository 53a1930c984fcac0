"""Every admin page of both apps opens in Chromium at 1280 px, for a superuser and for a
view-only staff user: no console error (a CSP violation is one), no uncaught exception, no
failed request, no horizontal scrollbar, no change list wider than its box (the admin scrolls
the table inside it, hiding the columns on the right). A screenshot of each is kept in build/screenshots/."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

# name -> (url name, the rows fixture's key whose pk is the argument, or None)
PAGES = {
    "index": ("admin:index", None),
    "dashboard": ("admin:workqueue_dashboard", None),
    "charts": ("admin:workqueue_dashboard_charts", None),
    "work items": ("admin:workqueue_workitem_changelist", None),
    "work item failed": ("admin:workqueue_workitem_change", "failed"),
    "work item running": ("admin:workqueue_workitem_change", "running"),
    "work item long key": ("admin:workqueue_workitem_change", "long"),
    "operations": ("admin:operations_operation_changelist", None),
    "operation pending": ("admin:operations_operation_change", "op_pending"),
    "operation cancelled": ("admin:operations_operation_change", "op_cancelled"),
    "schedules": ("admin:workqueue_schedule_changelist", None),
    "schedule": ("admin:workqueue_schedule_change", "schedule"),
    "schedule from settings": ("admin:workqueue_schedule_change", "settings_schedule"),
    "workers": ("admin:workqueue_worker_changelist", None),
    "worker": ("admin:workqueue_worker_change", "worker"),
    "flow control": ("admin:workqueue_queuecontrol_changelist", None),
    "environments": ("admin:workqueue_environment_changelist", None),
    "environment": ("admin:workqueue_environment_change", "environment"),
    "api keys": ("admin:workqueue_apikey_changelist", None),
    "maintenance runs": ("admin:workqueue_maintenancerun_changelist", None),
    "maintenance run": ("admin:workqueue_maintenancerun_change", "maintenance"),
}


def url_of(name: str, rows) -> str:
    url_name, key = PAGES[name]
    return reverse(url_name, args=[rows[key].pk]) if key else reverse(url_name)


def test_every_admin_list_of_both_apps_is_among_the_pages():
    """A model admin added later cannot be left out of the browser tests."""
    listed = {url for url, _ in PAGES.values()}
    for model in admin.site._registry:
        if model._meta.app_label in ("workqueue", "operations") and model._meta.model_name != "queuedashboard":
            assert f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist" in listed, model


@pytest.mark.parametrize("who", ["superuser", "viewer"])
@pytest.mark.parametrize("name", list(PAGES))
def test_page_opens_clean_at_1280_px(name, who, rows, request, as_user):
    user = request.getfixturevalue(who)
    page = as_user(user)
    response = page.open(url_of(name, rows))
    page.screenshot(f"{name} {who}")
    assert response.status == 200, f"{name}: {response.status}"
    assert page.page.locator("#content").count() == 1, f"{name}: no admin content (a login page?)"
    assert page.problems == [], f"{name}: {page.problems}"
    overflow = page.scroll_overflow()
    assert overflow <= 0, f"{name} is {overflow} px wider than a 1280 px window"
    cut = page.cut_tables()
    assert cut == [], f"{name}: a list's columns are cut off: {cut}"
