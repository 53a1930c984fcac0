"""Actions on a row's page in a real browser: the button, the confirmation page, the POST, the
message as written; with JavaScript off too (the pages use none for this)."""

from __future__ import annotations

from django.urls import reverse


def test_retry_now_from_a_failed_items_page_through_its_confirmation(rows, superuser, as_user):
    from workqueue.models import State, WorkItem

    page = as_user(superuser)
    failed = rows["failed"]
    page.open(reverse("admin:workqueue_workitem_change", args=[failed.pk]))
    page.page.get_by_role("link", name="Retry now").click()
    page.page.wait_for_load_state("load")
    assert WorkItem.objects.get(pk=failed.pk).state == State.STOPPED  # the confirmation changed nothing
    page.screenshot("work item retry confirmation")
    page.page.get_by_role("button", name="Retry now").click()
    page.page.wait_for_load_state("load")
    assert page.page.locator("ul.messagelist li.success").inner_text() == "test.noop: retried failed."
    assert WorkItem.objects.get(pk=failed.pk).state == State.QUEUED
    assert page.problems == []


def test_cancel_from_an_operations_page_with_javascript_off(rows, superuser, browser, live_server):
    from operations.models import Operation
    from tests.browser.conftest import _session_cookie

    context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=False)
    context.add_cookies([_session_cookie(superuser, live_server)])
    try:
        tab = context.new_page()
        op = rows["op_pending"]
        tab.goto(live_server.url + reverse("admin:operations_operation_change", args=[op.pk]))
        tab.get_by_role("link", name="Cancel").click()
        tab.get_by_role("button", name="Cancel").click()
        tab.wait_for_load_state("load")
        assert Operation.objects.get(pk=op.pk).state == "cancelled"
        assert "Asked" in tab.locator("ul.messagelist").inner_text()
    finally:
        context.close()


def test_a_viewer_is_offered_no_action(rows, viewer, as_user):
    page = as_user(viewer)
    for url in (
        reverse("admin:workqueue_workitem_change", args=[rows["failed"].pk]),
        reverse("admin:operations_operation_change", args=[rows["op_pending"].pk]),
        reverse("admin:workqueue_schedule_change", args=[rows["schedule"].pk]),
    ):
        page.open(url)
        assert page.page.locator("ul.wq-operate a.button").count() == 0, url
