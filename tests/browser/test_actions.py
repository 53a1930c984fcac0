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
        Operation.objects.filter(pk=op.pk).update(units_total=8, units_done=3)
        tab.goto(live_server.url + reverse("admin:operations_operation_change", args=[op.pk]))
        # Without JavaScript the page still shows its progress (as served), in its one bar.
        assert tab.locator("#op-live-progress").inner_text() == "3 of 8"
        assert tab.locator("#op-live-bar").evaluate("e => e.style.width") == "37.5%"
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


def test_cancel_from_an_operations_page_leaves_one_bar_in_the_cancelled_colour(rows, superuser, as_user):
    """The page has one progress bar, the live panel's (the form's field would disagree with it
    as the run goes on), and it takes the end state's colour, as the list's bars do."""
    from operations.admin import STATE_COLORS
    from operations.models import Operation

    op = rows["op_pending"]
    Operation.objects.filter(pk=op.pk).update(units_total=8, units_done=3)
    page = as_user(superuser)
    url = reverse("admin:operations_operation_change", args=[op.pk])
    page.open(url)
    bar = page.page.locator("#op-live-bar")

    def colour() -> str:
        return bar.evaluate("e => getComputedStyle(e).backgroundColor")

    def rgb(hex_colour: str) -> str:
        r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        return f"rgb({r}, {g}, {b})"

    assert page.page.locator(".op-progress-fill").count() == 0  # no second bar in the form
    assert bar.is_visible() and bar.evaluate("e => e.style.width") == "37.5%"
    assert colour() == rgb(STATE_COLORS["pending"])
    page.page.get_by_role("link", name="Cancel").click()
    page.page.get_by_role("button", name="Cancel").click()
    page.page.wait_for_load_state("load")
    assert Operation.objects.get(pk=op.pk).state == "cancelled"
    assert page.page.locator("#op-live-state").inner_text() == "cancelled"
    assert colour() == rgb(STATE_COLORS["cancelled"])
    page.screenshot("operation cancelled from its page")
    assert page.problems == []
