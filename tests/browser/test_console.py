"""What an operator does in the console, in a real browser: pause and resume a queue and edit
one queue's limits from the dashboard, a bulk action over ticked rows, a search by metadata
and by error text. No console error on the way."""

from __future__ import annotations

from django.urls import reverse


def _flow_row(page, queue: str):
    return page.page.locator("#flow-control tbody tr", has=page.page.locator(f'th:text-is("{queue}")'))


def test_pause_resume_and_edit_one_queues_limits_from_the_dashboard(rows, superuser, as_user):
    from workqueue.models import QueueControl

    page = as_user(superuser)
    page.open(reverse("admin:workqueue_dashboard"))
    row = _flow_row(page, "test.noop")
    row.get_by_role("button", name="Resume").click()
    page.page.wait_for_load_state("load")
    assert page.page.locator("ul.messagelist li.success").inner_text() == "test.noop: resumed the queue."
    assert not QueueControl.objects.get(pk="test.noop").paused
    row = _flow_row(page, "test.noop")
    row.get_by_role("button", name="Pause").click()
    page.page.wait_for_load_state("load")
    assert QueueControl.objects.get(pk="test.noop").paused

    assert page.page.locator('#flow-control input[type="text"]').count() == 0  # no inputs until asked
    _flow_row(page, "test.noop").get_by_role("link", name="Edit the limits of test.noop").click()
    page.page.wait_for_load_state("load")
    inputs = page.page.locator('#flow-control input[type="text"]')
    assert inputs.count() == 4  # one row's four limits, no other row's
    page.page.get_by_label("max running", exact=True).fill("3")
    page.page.get_by_label("rate", exact=True).fill("20/s")
    page.screenshot("dashboard flow control editing one row")
    page.page.get_by_role("button", name="Save").click()
    page.page.wait_for_load_state("load")
    control = QueueControl.objects.get(pk="test.noop")
    assert (control.max_running, control.rate_count, control.rate_period) == (3, 20, 1.0)
    assert "max_running=3 (override)" in page.page.locator("ul.messagelist li.success").inner_text()
    assert page.page.locator('#flow-control input[type="text"]').count() == 0
    assert page.scroll_overflow() == 0

    _flow_row(page, "test.noop").get_by_role("link", name="History").click()
    page.page.wait_for_load_state("load")
    history = page.page.locator("#change-history").inner_text()
    assert "Paused the queue." in history and "Resumed the queue." in history and "max_running=3" in history
    assert page.problems == []


def test_a_bulk_action_over_ticked_rows(rows, superuser, as_user):
    from workqueue.models import Outcome, State, WorkItem

    page = as_user(superuser)
    page.open(reverse("admin:workqueue_workitem_changelist") + "?state__exact=queued")
    ticked = [rows["queued"].pk, rows["long"].pk]
    for pk in ticked:
        page.page.locator(f'input.action-select[value="{pk}"]').check()
    page.page.locator('select[name="action"]').select_option("force_stop")
    page.page.get_by_role("button", name="Run").click()
    page.page.wait_for_load_state("load")
    assert page.page.locator("ul.messagelist li").first.inner_text() == "Force-stopped 2 work items."
    assert set(WorkItem.objects.filter(pk__in=ticked).values_list("state", "outcome")) == {
        (State.STOPPED, Outcome.CANCELLED)
    }
    assert WorkItem.objects.get(pk=rows["scheduled"].pk).state == State.QUEUED  # not ticked: untouched
    assert page.problems == []


def test_search_by_metadata_and_by_error_text(rows, superuser, as_user):
    page = as_user(superuser)
    page.open(reverse("admin:workqueue_workitem_changelist"))
    box = page.page.locator("#searchbar")
    box.fill("account=42")
    box.press("Enter")
    page.page.wait_for_load_state("load")
    keys = page.page.locator("#result_list tbody tr th").all_inner_texts()
    assert len(keys) == 1 and keys[0].startswith("k"), keys  # the item whose metadata holds account 42
    box = page.page.locator("#searchbar")
    box.fill("error:boom")
    box.press("Enter")
    page.page.wait_for_load_state("load")
    assert page.page.locator("#result_list tbody tr th").all_inner_texts() == ["failed"]
    page.screenshot("work items searched by error text")
    assert page.problems == []
