"""The settlement rollup (workqueue.stats): minutes and hours rolled up from the stopped items,
read back with the minutes it has not reached, never a minute twice; the dashboard's last hour
is the same before and after a rollup; percentiles from the histograms; prune; and the reads
on a big table touch only the rollup and the minutes since it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.models import F
from django.db.models.functions import Now

from workqueue import stats
from workqueue.admin import snapshot as dashboard
from workqueue.models import HIST_BUCKETS, QueueStats, WorkItem
from workqueue.sql import QUERIES
from workqueue.sweeps import run_sweep

pytestmark = pytest.mark.django_db


def settled(
    queue: str, key: str, *, ago: dt.timedelta, waited: float = 0.0, ran: float = 0.0, ok=True, at=None
) -> None:
    """An item that waited ``waited`` s from run_after to its start and ran ``ran`` s, settled
    ``ago`` before ``at`` (default: the statement's now; Django's Now() moves statement by
    statement, so items meant to share a minute take one ``at``)."""
    WorkItem.objects.enqueue(queue, key)
    stopped_at = (Now() if at is None else at) - ago
    WorkItem.objects.filter(queue=queue, key=key).update(
        state="stopped",
        outcome="succeeded" if ok else "failed",
        stopped_at=stopped_at,
        started_at=stopped_at - dt.timedelta(seconds=ran),
    )
    WorkItem.objects.filter(queue=queue, key=key).update(run_after=F("started_at") - dt.timedelta(seconds=waited))


def db_now() -> dt.datetime:
    with connection.cursor() as cur:
        cur.execute("SELECT now()")
        return cur.fetchone()[0]


def last_hour(now=None) -> dict[str, tuple]:
    snap = dashboard.snapshot(now=now)
    return {
        q.name: (q.completed_hour, q.failed_hour, q.buckets) for q in snap.queues if q.completed_hour or q.failed_hour
    }


@pytest.fixture
def history(db):
    # One instant for all: five items 50 minutes ago are in one minute even when the clock
    # crosses a minute while they are written (it did once in CI: two minutes of a-*).
    at = db_now()
    for n in range(5):
        settled("test.noop", f"a-{n}", ago=dt.timedelta(minutes=50), waited=0.1, ran=2.0, at=at)
    for n in range(3):
        settled("test.noop", f"b-{n}", ago=dt.timedelta(minutes=12), ran=0.01, ok=False, at=at)
    settled("test.capped", "c", ago=dt.timedelta(minutes=3), waited=30.0, ran=0.5, at=at)
    settled("test.capped", "now", ago=dt.timedelta(seconds=1), at=at)  # within the lag: not rolled up yet
    settled("test.noop", "old", ago=dt.timedelta(hours=3), at=at)  # before the backfill: never rolled up


def test_a_rollup_changes_nothing_the_dashboard_shows_and_counts_no_minute_twice(history):
    before = last_hour()
    assert before["test.noop"][:2] == (5, 3) and before["test.capped"][:2] == (2, 0)
    assert stats.rollup() == 3  # the minutes of a-*, b-* and c; "now" is inside the lag
    assert last_hour() == before
    assert stats.rollup() == 0  # nothing new ended
    assert last_hour() == before
    rows = {(r.queue, r.succeeded, r.failed) for r in QueueStats.objects.filter(span=60)}
    assert rows == {("test.noop", 5, 0), ("test.noop", 0, 3), ("test.capped", 1, 0)}
    assert sum(sum(r.run_hist) for r in QueueStats.objects.filter(span=60)) == 9


def test_the_hours_are_the_sums_of_their_minutes(history):
    stats.rollup()
    minutes = QueueStats.objects.filter(span=60)
    hours = QueueStats.objects.filter(span=3600)
    for queue in ("test.noop", "test.capped"):
        mine = [m for m in minutes if m.queue == queue]
        theirs = [h for h in hours if h.queue == queue]
        assert sum(h.succeeded for h in theirs) == sum(m.succeeded for m in mine)
        assert sum(h.failed for h in theirs) == sum(m.failed for m in mine)
        assert [sum(col) for col in zip(*(h.wait_hist for h in theirs), strict=True)] == [
            sum(col) for col in zip(*(m.wait_hist for m in mine), strict=True)
        ]
    series = stats.hours()
    assert sum(p.succeeded + p.failed for p in series["test.noop"]) == 8


def test_percentiles_come_from_the_histograms_within_their_bucket(history):
    stats.rollup()
    [noop] = [p for p in stats.minutes()["test.noop"] if p.succeeded]
    p50 = stats.percentile(noop.run, 0.5)
    assert 2.0 <= p50 < 2.0 * 1.42, p50  # ran 2 s: the bucket's upper bound
    assert stats.percentile(noop.wait, 0.95) == pytest.approx(stats.bucket_bound(13))  # 100 ms
    assert stats.percentile((0,) * HIST_BUCKETS, 0.5) is None
    every = stats.combined(stats.minutes())
    assert sum(p.succeeded for p in every) == 7 and sum(p.failed for p in every) == 3


def test_the_sweeps_roll_up_and_reap_prunes_what_is_past_its_keep(history):
    assert run_sweep("recover").counts["rolled_up"] == 3
    QueueStats.objects.create(
        queue="test.noop", span=60, period=db_now() - dt.timedelta(days=3), wait_hist=[0] * 48, run_hist=[0] * 48
    )
    QueueStats.objects.create(
        queue="test.noop", span=3600, period=db_now() - dt.timedelta(days=9), wait_hist=[0] * 48, run_hist=[0] * 48
    )
    counts = run_sweep("reap").counts
    assert counts["rolled_up"] == 0 and counts["stats_pruned"] == 2


def test_a_snapshot_pinned_before_the_rollup_reads_no_minute_after_it(history):
    now = db_now()
    stats.rollup()
    earlier = now - dt.timedelta(minutes=20)
    shown = last_hour(earlier)
    # At that instant only a-* had settled (30 minutes before it); b-* and c were still ahead.
    assert set(shown) == {"test.noop"} and shown["test.noop"][:2] == (5, 0)


def test_the_last_hour_on_a_big_history_reads_the_rollup_and_only_the_minutes_since(db):
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO work_items (public_id, queue, key, state, outcome, priority, run_after, attempts,
                                    max_attempts, metadata, wire, reclaimed, handed_out, last_error, claimed_by,
                                    created_at, started_at, stopped_at)
            SELECT work_mint_id('work_'), 'test.noop', 'h-' || g, 'stopped', 'succeeded', 0, a.at, 1, 5, '{}',
                   false, false, false, '', 'x', a.at, a.at, a.at
            FROM generate_series(1, 60000) AS g
            CROSS JOIN LATERAL (SELECT now() - interval '70 seconds' - make_interval(secs => g * 0.05)) AS a(at)
            """
        )
        cur.execute("ANALYZE work_items")
    before = last_hour()["test.noop"]
    assert before[0] == 60000
    assert stats.rollup() >= 50
    assert last_hour() == {"test.noop": before}
    with connection.cursor() as cur:
        cur.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + QUERIES["stats_minutes"],
            {"now": None, "window": 3600.0},
        )
        plan = cur.fetchone()[0][0]["Plan"]
    touched = plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0)
    # 60,000 items fill hundreds of pages; the rollup's minutes and the few seconds since, a handful.
    assert touched < 100, f"{touched} buffers to read the last hour after a rollup"


def test_the_charts_page_draws_a_queue_per_minute_and_per_hour_for_a_view_only_user(history, client):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.urls import reverse

    user = get_user_model().objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_workitem"))
    client.force_login(user)
    stats.rollup()
    url = reverse("admin:workqueue_dashboard_charts")
    page = client.get(url, {"queue": "test.noop"}).content.decode()
    assert "test.noop: last hour, per minute" in page
    assert "5 succeeded, 3 failed" in page
    assert page.count('<svg class="wq-chart"') == 3 and "5 succeeded, 0 failed" in page  # the a-* minute's bar
    assert "run p50 2.0 s" in page  # the bucket bound of 2 s runs (2.048 s)
    week = client.get(url, {"range": "week"}).content.decode()
    # Hours are as of the last rollup: the item settled a second ago is not in them yet.
    assert "All queues: last week, per hour" in week and "6 succeeded, 3 failed" in week
    odd = client.get(url, {"queue": "no.such.queue", "range": "decade"})
    assert odd.status_code == 200 and "All queues: last hour, per minute" in odd.content.decode()
    assert (
        reverse("admin:workqueue_dashboard_charts") in client.get(reverse("admin:workqueue_dashboard")).content.decode()
    )


def test_a_rollup_while_another_holds_the_lock_skips(history):
    import threading

    from workqueue import store

    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def holder():
        from django.db import connections, transaction

        try:
            with transaction.atomic():
                store.maintenance_try_lock(name=stats.LOCK)
                held.set()
                release.wait(10)
        finally:
            connections.close_all()
            done.set()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        assert stats.rollup() == 0 and not QueueStats.objects.exists()
    finally:
        release.set()
        thread.join(10)
    assert stats.rollup() == 3
