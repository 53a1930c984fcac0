"""The queue dashboard: its numbers are the rows (and the QuerySet scopes), and it reads only live rows."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.urls import reverse
from django.utils.html import strip_tags

from tests.workqueue.admin.conftest import make_item
from workqueue import sql
from workqueue.admin import snapshot as dashboard
from workqueue.environments import create_environment
from workqueue.models import MaintenanceRun, Poller, State, Worker, WorkItem

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:workqueue_dashboard")
SCOPES = ("ready", "scheduled", "pending", "running", "stopping", "stuck")


def snapshot_of(client):
    response = client.get(DASHBOARD)
    assert response.status_code == 200
    snap = response.context["snapshot"]
    return snap, {q.name: q for q in snap.queues}, response.content.decode()


def text(page: str) -> str:
    return " ".join(strip_tags(page).split())


@pytest.fixture
def busy_queues(db):
    """Rows in every situation on test.capped (max_running 3) and test.wire (self_hosted)."""
    # Settled within the hour: 2 completed, 1 failed; and one settled two hours ago.
    for key in ("done-0", "done-1", "bad-0"):
        WorkItem.objects.enqueue("test.capped", key)
    done = WorkItem.objects.claim(["test.capped"], limit=3, worker_id="w0", lease=120).items
    assert len(done) == 3
    WorkItem.objects.complete(done[0])
    WorkItem.objects.complete(done[1])
    WorkItem.objects.fail(done[2], "boom", permanent=True)
    make_item("test.capped", "long-ago", State.STOPPED, stopped_at=Now() - dt.timedelta(hours=2))

    # Held: one lapsed (stuck), one live, one stopping under a live lease.
    for i in range(6):
        WorkItem.objects.enqueue("test.capped", f"r{i}")
    lapsed, _live, stopping = WorkItem.objects.claim(["test.capped"], limit=3, worker_id="w1", lease=120).items
    WorkItem.objects.filter(pk=lapsed.id).update(lease_expires_at=Now() - dt.timedelta(minutes=1))
    WorkItem.objects.filter(pk=stopping.id).update(state=State.STOPPING)
    # Queued: 3 ready left from above, 2 scheduled, 1 ready but far past due (stuck).
    WorkItem.objects.enqueue("test.capped", "later-0", delay=600)
    WorkItem.objects.enqueue("test.capped", "later-1", delay=600)
    make_item("test.capped", "late", run_after=Now() - dt.timedelta(minutes=10))

    env, _key = create_environment("edge", "self_hosted")
    wire = [WorkItem.objects.enqueue("test.wire", f"w{i}", environment=env)[0] for i in range(3)]
    assert all(item.wire for item in wire)
    WorkItem.objects.filter(pk=wire[0].id).update(lease_expires_at=Now() + dt.timedelta(seconds=30))
    WorkItem.objects.enqueue("test.wire", "w-later", environment=env, delay=600)
    Poller.objects.create(environment=env, worker_id="p1")
    Poller.objects.create(environment=env, worker_id="p2")
    Poller.objects.create(environment=env, worker_id="p-gone", last_seen=Now() - dt.timedelta(minutes=5))

    Worker.objects.create(id="alive", host="h", pid=1, queues=["test.capped"])
    Worker.objects.create(
        id="stale", host="h", pid=2, queues=["test.capped", "test.other"], last_seen=Now() - dt.timedelta(minutes=10)
    )
    Worker.objects.create(
        id="exited", host="h", pid=3, queues=["test.capped"], state="stopped", last_seen=Now() - dt.timedelta(hours=1)
    )
    MaintenanceRun.objects.create(
        name="recover", started_at=Now() - dt.timedelta(minutes=2), finished_at=Now() - dt.timedelta(minutes=2)
    )
    return env


def test_dashboard_numbers_match_the_rows(admin_client, busy_queues):
    snap, queues, page = snapshot_of(admin_client)
    capped = queues["test.capped"]
    assert (capped.ready, capped.scheduled, capped.pending) == (4, 2, 0)
    assert (capped.running, capped.stopping, capped.stuck) == (2, 1, 2)
    assert (capped.live_held, capped.max_running) == (2, 3)
    assert (capped.completed_hour, capped.failed_hour) == (2, 1)
    assert sum(c for c, _ in capped.buckets) == 2 and sum(f for _, f in capped.buckets) == 1
    assert capped.buckets[-1] == (2, 1)  # all in the newest five minutes
    assert 590 <= capped.oldest_wait <= 900
    assert (capped.workers_alive, capped.workers_stale) == (1, 1)

    wire = queues["test.wire"]
    assert (wire.ready, wire.pending, wire.scheduled, wire.stuck) == (2, 1, 1, 0)
    assert [(e.name, e.depth, e.pending, e.workers_polling) for e in snap.environments] == [("edge", 2, 1, 2)]
    assert snap.environments_total == 1

    # A configured queue with nothing in it still shows, with zeros.
    other = queues["test.other"]
    assert (other.ready, other.running, other.completed_hour, other.workers_alive, other.workers_stale) == (
        0,
        0,
        0,
        0,
        1,
    )
    assert other.configured and other.has_handler
    assert (snap.workers_alive, snap.workers_stale) == (1, 1)
    assert snap.totals.ready == sum(q.ready for q in snap.queues) == 6

    recover, reap = snap.sweeps
    assert recover.name == "recover" and recover.ok and 100 <= recover.ago <= 200
    assert reap.name == "reap" and reap.ago is None
    assert not snap.maintenance_overdue

    assert "2 / 3" in page
    assert "?queue=test.capped&amp;stuck=yes" in page
    assert "last recover 2 min ago ok" in text(page)
    assert "Neither <code>manage.py recover</code>" not in page


def test_dashboard_numbers_are_the_queryset_scopes(admin_client, busy_queues):
    _snap, queues, _page = snapshot_of(admin_client)
    for name, stats in queues.items():
        rows = WorkItem.objects.filter(queue=name)
        for scope in SCOPES:
            assert getattr(stats, scope) == getattr(rows, scope)().count(), (name, scope)
        live_held = rows.held().filter(lease_expires_at__gt=Now()).count()
        assert stats.live_held == live_held, name


def test_every_queue_shows_even_when_the_table_is_empty(admin_client):
    snap, queues, page = snapshot_of(admin_client)
    assert {"test.noop", "test.other", "test.capped", "test.wire"} <= set(queues)
    assert all(q.ready == q.running == q.stuck == 0 for q in snap.queues)
    assert "No self-hosted environments" in page
    assert snap.maintenance_overdue
    assert "Neither <code>manage.py recover</code>" in page


def test_a_warning_shows_when_no_sweep_succeeded_lately(admin_client):
    MaintenanceRun.objects.create(
        name="recover", started_at=Now() - dt.timedelta(minutes=30), finished_at=Now() - dt.timedelta(minutes=30)
    )
    MaintenanceRun.objects.create(name="reap", started_at=Now(), finished_at=Now(), ok=False, error="boom")
    snap, _queues, page = snapshot_of(admin_client)
    assert snap.maintenance_overdue
    assert "Neither <code>manage.py recover</code>" in page
    assert "last recover 30 min ago ok" in text(page)
    assert "last reap 0 s ago failed" in text(page)


def test_the_snapshot_can_be_pinned_to_an_instant(db):
    item, _ = WorkItem.objects.enqueue("test.noop", "pinned")
    held = WorkItem.objects.claim(["test.noop"], limit=1, worker_id="w", lease=60).items[0]
    WorkItem.objects.complete(held)
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now = cursor.fetchone()[0]
    later = {q.name: q for q in dashboard.snapshot(now=now + dt.timedelta(minutes=32)).queues}["test.noop"]
    # 32 minutes after the completion it sits in bucket 6 (30–35 min ago), the 6th from the left.
    assert later.buckets[5] == (1, 0) and later.completed_hour == 1
    gone = {q.name: q for q in dashboard.snapshot(now=now + dt.timedelta(minutes=61)).queues}["test.noop"]
    assert gone.completed_hour == 0
    assert item.id == held.id


def test_the_dashboard_reads_live_rows_through_the_partial_indexes(db):
    WorkItem.objects.enqueue_many([("test.noop", f"old-{i}") for i in range(20_000)])
    WorkItem.objects.filter(queue="test.noop").update(
        state=State.STOPPED, outcome="succeeded", stopped_at=Now() - dt.timedelta(hours=3)
    )
    for i in range(20):
        WorkItem.objects.enqueue("test.noop", f"live-{i}")
    params = {"now": None, "stuck_after": 300.0, "held_back": [], "window": 3600.0}
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE work_items")
        for name in ("queue_stats", "stats_minutes"):
            cursor.execute("EXPLAIN " + sql.QUERIES[name], params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Seq Scan on work_items" not in plan, plan
            assert "work_items_unsettled_keyed_idx" in plan or "work_items_stopped_idx" in plan, plan


@pytest.mark.parametrize(("alive", "words"), [(1, "1 worker alive"), (2, "2 workers alive")])
def test_the_workers_card_says_worker_for_one_and_workers_for_more(admin_client, alive, words):
    for n in range(alive):
        Worker.objects.create(id=f"alive-{n}", host="h", pid=n + 1, queues=["test.capped"])
    _snap, _queues, page = snapshot_of(admin_client)
    assert words in text(page)
