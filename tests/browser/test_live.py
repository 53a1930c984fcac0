"""Live pages in a real browser: the dashboard and the work-item list update in place after an
enqueue (no reload), the Pause toggle stops that, Schedules' next run counts down, and a
retried item's page shows its attempt timeline."""

from __future__ import annotations

from django.urls import reverse

# live.js refetches every LIVE_EVERY_SECONDS (5): allow a few rounds before giving up.
UPDATE_WAIT_MS = 20_000


def _mark_loaded(page) -> None:
    """A marker on window that a reload would drop: the page was updated in place if it stays."""
    page.evaluate("window.__sameLoad = true")


def _same_load(page) -> bool:
    return page.evaluate("window.__sameLoad === true")


def test_the_dashboard_shows_a_new_item_without_a_reload(rows, superuser, as_user):
    from workqueue.models import WorkItem

    page = as_user(superuser)
    page.open(reverse("admin:workqueue_dashboard"))
    assert page.page.locator("#wq-live").is_visible()  # shown by live.js: JavaScript is on
    row = page.page.locator("#wq-queues tbody tr", has_text="test.other")
    before = row.locator("td").first.inner_text()
    _mark_loaded(page.page)
    WorkItem.objects.enqueue_many([("test.other", f"live-{n}") for n in range(7)])
    page.page.wait_for_function(
        "([before]) => { const r = [...document.querySelectorAll('#wq-queues tbody tr')]"
        ".find(t => t.textContent.includes('test.other'));"
        " return r && r.querySelector('td').textContent.trim() !== before; }",
        arg=[before.strip()],
        timeout=UPDATE_WAIT_MS,
    )
    assert _same_load(page.page)
    assert int(row.locator("td").first.inner_text().replace(",", "")) == int(before.replace(",", "") or 0) + 7
    assert page.problems == []


def test_the_work_item_list_updates_in_place_and_pause_stops_it(rows, superuser, as_user):
    from workqueue.models import WorkItem

    page = as_user(superuser)
    page.open(reverse("admin:workqueue_workitem_changelist") + "?queue=test.other")
    _mark_loaded(page.page)
    WorkItem.objects.enqueue("test.other", "arrived-live")
    page.page.locator("#result_list", has_text="arrived-live").wait_for(timeout=UPDATE_WAIT_MS)
    assert _same_load(page.page)

    page.page.get_by_role("button", name="Pause live updates").click()
    assert page.page.get_by_role("button", name="Resume live updates").get_attribute("aria-pressed") == "true"
    updated = page.page.locator("#wq-live").get_attribute("data-updated")
    WorkItem.objects.enqueue("test.other", "arrived-while-paused")
    page.page.wait_for_timeout(7_000)  # more than one round: a running updater would have fetched
    assert page.page.locator("#wq-live").get_attribute("data-updated") == updated
    assert "arrived-while-paused" not in page.page.locator("#result_list").inner_text()
    page.page.get_by_role("button", name="Resume live updates").click()
    page.page.locator("#result_list", has_text="arrived-while-paused").wait_for(timeout=UPDATE_WAIT_MS)
    assert page.problems == []


def test_a_ticked_row_is_not_swept_away_by_an_update(rows, superuser, as_user):
    from workqueue.models import WorkItem

    page = as_user(superuser)
    page.open(reverse("admin:workqueue_workitem_changelist") + "?queue=test.other")
    page.page.locator("#result_list input.action-select").first.check()
    WorkItem.objects.enqueue("test.other", "arrived-while-ticked")
    page.page.wait_for_timeout(7_000)
    assert page.page.locator("#result_list input.action-select:checked").count() == 1
    assert "arrived-while-ticked" not in page.page.locator("#result_list").inner_text()


def test_schedules_next_run_counts_down(rows, superuser, as_user):
    page = as_user(superuser)
    page.open(reverse("admin:workqueue_schedule_changelist"))
    countdown = page.page.locator("tr", has_text="tenner").locator("time.wq-countdown")
    first = countdown.inner_text()
    assert first.startswith("in ")
    page.page.wait_for_function(
        "([el, first]) => el.textContent !== first", arg=[countdown.element_handle(), first], timeout=10_000
    )
    # It moved; a 10 s schedule may have come due meanwhile (it did once in CI).
    moved = countdown.inner_text()
    assert moved.startswith("in ") or moved == "due now", moved
    assert page.problems == []


def test_a_retried_items_page_shows_one_row_per_attempt(rows, superuser, as_user):
    import datetime as dt

    from django.db.models.functions import Now

    from workqueue.models import WorkItem

    # The fixture's other test.other item is due first: out of the way, so each claim takes this one.
    WorkItem.objects.filter(queue="test.other").update(run_after=Now() + dt.timedelta(hours=1))
    WorkItem.objects.enqueue("test.other", "three-times", max_attempts=5)
    for worker, error in (("w-one", "boom one"), ("w-two", "boom two")):
        WorkItem.objects.filter(key="three-times").update(run_after=Now())
        (item,) = WorkItem.objects.claim(["test.other"], limit=1, worker_id=worker).items
        WorkItem.objects.fail(item, error)
    WorkItem.objects.filter(key="three-times").update(run_after=Now())
    (item,) = WorkItem.objects.claim(["test.other"], limit=1, worker_id="w-three").items
    WorkItem.objects.complete(item)

    page = as_user(superuser)
    page.open(reverse("admin:workqueue_workitem_change", args=[item.id]))
    attempts = page.page.locator("table.wq-timeline tbody tr")
    assert attempts.count() == 3
    texts = [attempts.nth(n).inner_text() for n in range(3)]
    assert "w-one" in texts[0] and "retried" in texts[0] and "boom one" in texts[0]
    assert "w-two" in texts[1] and "boom two" in texts[1]
    assert "w-three" in texts[2] and "succeeded" in texts[2]
    page.screenshot("work item with three attempts")
    assert page.problems == []
